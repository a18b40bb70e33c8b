// Package probesnat makes kubelet probes recognisable inside meshed pods.
//
// The kubelet probes a pod from the node itself, so inside the pod its
// connections look like any other inbound traffic and would be captured by
// the proxy. As upstream's node agent does, connections that host processes
// open to a meshed pod's IP are SNATed on the node to 169.254.7.127 (IPv4) or
// fd16:9254:7127:1337:ffff:ffff:ffff:ffff (IPv6), the
// source the in-pod rules (package redirect) let through untouched. Only
// locally originated traffic (source address local to the node) is
// rewritten; pod-to-pod traffic forwarded by the node keeps its source.
//
// The rule lives in one nftables table in the node's netns, with a set of
// meshed pod IPs per family that the node agent keeps current.
package probesnat
