// Package proxy is meshctl's node proxy, the ztunnel of the bundled dataplane.
// For every pod the node agent hands over (netns fd and identity) it opens,
// inside the pod's network namespace, 15001 (outbound capture, original
// destination from SO_ORIGINAL_DST, carried over HBONE), 15006 (inbound
// plaintext) and 15008 (inbound HBONE); it obtains the pod's certificate,
// and serves admin (/config_dump, localhost:15000), Prometheus metrics
// (:15020) and readiness (:15021) in its own namespace.
//
// Workloads arrive through the WorkloadEvents interface rather than a ZDS
// codec of its own: the ZDS client lives in pkg/dataplane/zds and is adapted
// to this interface, so the proxy does not care how the node agent talks.
//
// Not yet done: inbound connections reach the pod from the pod's own address
// (ztunnel preserves the client's address with IP_TRANSPARENT), there is no
// policy source for the 401 hook (hbone.WithAuthorizer).
//
// Entry point: Run(ctx, opts...). In a cluster, certificates come from
// WithFetcher(csr.NewClient(clientset)).
package proxy
