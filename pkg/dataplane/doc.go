// Package dataplane is meshctl's bundled CNI (install-cni, the CNI plugin,
// the node agent) and HBONE proxy, wire-compatible with Istio ambient.
//
// This package is its entry: Main runs the dataplane image's binary
// (cmd/meshctl-dataplane), Commands and Run its entry points one by one
// (meshctl's hidden `meshctl dataplane …` commands), PluginMain the CNI
// plugin, and the Default constants are the defaults of their flags. The
// pieces a Go program outside meshctl can use on their own, each checked
// against Istio's implementation in bench/, are the subpackages hbone (the
// HBONE client and server), identity (SPIFFE identities), certs and
// certs/istioca (workload certificates, from istiod's CA) and proxy (the
// node proxy, with istiod's XDS as one source). Everything else is under
// internal/.
package dataplane
