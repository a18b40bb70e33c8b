// Package redirect installs the in-pod traffic redirection of Istio ambient
// inside one pod's network namespace, with nftables over netlink (no nft or
// iptables binary is needed on the node).
//
// Inside the pod, TCP arriving for the pod is redirected to the proxy's
// inbound plaintext port 15006 and TCP the pod sends out to its outbound
// capture port 15001; HBONE on 15008 arrives untouched. The proxy marks its
// own sockets 0x539 (under mask 0xfff), which is what keeps its upstream
// connections from being captured again. Kubelet probes are exempt by source
// address: upstream's node agent SNATs them to 169.254.7.127 on the host, so
// the same default keeps a pod's probes working whichever agent set it up.
//
// Source preservation: the proxy connects to the pod's app from the remote
// client's address (IP_TRANSPARENT). Such a connection's first packet loops
// over lo still carrying the bypass mark, and mangle_prerouting gives the
// connection mark 0x111; mangle_output (a route chain) copies it onto the
// app's replies, and the policy route `fwmark 0x111/0xfff lookup 100`, with
// `local 0.0.0.0/0 dev lo` (and ::/0) in table 100, delivers them back to the
// proxy instead of sending them out towards the real client. These are
// upstream's values, so either agent's rules serve either proxy.
//
// All rules live in one table of their own, replaced in a single netlink
// batch, so reapplying after an agent restart never leaves a window in which
// a running pod's traffic escapes the proxy.
package redirect
