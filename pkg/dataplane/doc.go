// Package dataplane is meshctl's bundled CNI (install-cni, the CNI plugin,
// the node agent) and HBONE proxy, wire-compatible with Istio ambient.
package dataplane
