// Package check proves an environment's connectivity with real traffic. In
// every cluster it runs a server pod (busybox nc, answering with its
// cluster's name) behind a ClusterIP Service and, started beside it, a
// client pod in which the probes run (exec) once every server runs: they
// connect to the server of every cluster on its network — its own
// included, so a broken cluster is told apart from a missing route — by each
// pod IP and each service IP. Clusters on other networks are reached
// through east-west gateways, which this check reports but does not test
// (the meshed mode does).
//
// Everything lives in one namespace per cluster, deleted afterwards, and a
// stale one left by an interrupted run is deleted first.
//
// The meshed mode (WithMeshed) runs in an ambient namespace, with a Service
// per cluster's server in every cluster, and judges each probe by the node
// proxies' /debug/connections (read through the API server's port-forward):
// HBONE out of the client's proxy and into the server's, each side naming
// the other's identity, or the probe fails. A server on another network is
// probed by the client's own cluster's VIP of its Service: the client's
// proxy must have sent it through that network's east-west gateway (double
// HBONE) and the server's proxy received it from a gateway pod, still with
// the client's identity.
package check
