// Package routes joins the clusters of an environment that share a network,
// the first part of `meshctl connect` (pkg/connect/gateway and
// pkg/connect/remotesecret are the others). Clusters on the same network get
// routes — on every node, to every node's pod CIDRs (IPv4 and IPv6) and to
// every service CIDR — so pods reach each other directly, as in a flat
// multi-cluster mesh. Clusters on different networks get no routes: they
// meet through east-west gateways.
//
// The route plan is pure (RoutePlan); applying it (Apply) costs one batched
// `ip -batch` per node, through an Executor, so the same code runs against
// kind nodes and against network namespaces in tests.
package routes
