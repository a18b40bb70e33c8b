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
// Entry point: Run(ctx, opts...).
package proxy
