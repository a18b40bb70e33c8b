// Package proxy is meshctl's node proxy, the ztunnel of the bundled dataplane.
// For every pod the node agent hands over (netns fd and identity) it opens,
// inside the pod's network namespace, 15001 (outbound capture, original
// destination from SO_ORIGINAL_DST, carried over HBONE), 15006 (inbound
// plaintext) and 15008 (inbound HBONE); it obtains the pod's certificate,
// and serves admin (/config_dump, /debug/connections: the recent
// connections with their peer identities; localhost:15000), Prometheus metrics
// (:15020) and readiness (:15021) in its own namespace.
//
// Workloads arrive through the WorkloadEvents interface rather than a ZDS
// codec of its own: the ZDS client lives in pkg/dataplane/zds and is adapted
// to this interface, so the proxy does not care how the node agent talks.
//
// Inbound connections (HBONE and plaintext) reach the app from the client's
// own address, as with ztunnel: the upstream socket is IP_TRANSPARENT, bound
// to that address, and the in-pod rules of package redirect route the app's
// replies back to it. Without CAP_NET_ADMIN the proxy falls back to the
// pod's address (logged once, counted in
// meshctl_proxy_source_preservation_fallbacks_total).
//
// With WithDiscovery the proxy routes by a model of the mesh's workloads
// and services (package dataplane/internal/model, fed by informers on this
// cluster and on every cluster a remote secret names): a Service VIP goes
// over HBONE to a ready endpoint's ip:targetPort, a pod address to that
// pod, and every tunnel requires the destination workload's identity
// (secure naming; refusals in meshctl_hbone_handshake_failures_total
// {reason="peer_identity"}). A mesh-CIDR address the model does not know is
// refused (meshctl_proxy_outbound_refused_total), other destinations pass
// through. Without it, mesh CIDRs go over HBONE to any mesh identity.
//
// Authorization (WithPolicies): Istio's AuthorizationPolicy and
// PeerAuthentication at L4, read from the cluster once their CRDs exist and
// evaluated as ztunnel does (package internal/policy). A denied tunnel gets
// 401, a denied plaintext connection on 15006 (all of them under STRICT
// mTLS) a reset; both count in meshctl_proxy_policy_denied_total, and
// /config_dump lists the policies.
//
// Not yet done: endpoints on other networks (east-west gateways) are not
// reached.
//
// Entry point: Run(ctx, opts...). In a cluster, certificates come from
// WithFetcher(csr.NewClient(clientset)).
package proxy
