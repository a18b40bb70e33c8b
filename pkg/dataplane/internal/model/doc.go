// Package model is the node proxy's picture of the mesh: workloads (pods,
// with their addresses, identity, node, cluster, network and health) and
// services (VIPs, ports, endpoints), as ztunnel keeps it.
//
// Sources feed it through Sink, per cluster: the standalone source (Kube,
// client-go informers on the local cluster and on every cluster a remote
// secret names) and, later, istiod over XDS. The model merges clusters with
// Istio's multi-cluster semantics: one namespace/name is one service across
// clusters, its endpoints the union of every cluster's, and each cluster's
// ClusterIP one of its VIPs.
//
// The proxy consults it on every outbound connection (Resolve): lookups are
// map lookups under a read lock and allocate nothing.
package model
