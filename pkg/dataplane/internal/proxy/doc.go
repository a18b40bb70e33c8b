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
// codec of its own: the ZDS client lives in pkg/dataplane/internal/zds and
// is adapted to this interface, so the proxy does not care how the node
// agent talks.
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
// Other networks, as ztunnel: an endpoint on another network is reached
// through that network's east-west gateway (the model knows it from the
// gateway Service's network label and load-balancer address) by double
// HBONE — an outer tunnel to the gateway, requiring its identity, both
// CONNECTs naming the service (host:port), and inside the outer one a
// tunnel of its own, mutual TLS end to end with the endpoint's proxy,
// requiring one of the service's identities there. No known gateway:
// refused (reason no_network_gateway). Gateway is the other end: the
// proxy's gateway mode (RunGateway), which terminates the outer tunnel
// with its own identity, picks a ready endpoint on its network and splices
// the stream to that endpoint's 15008 unread; tunnels it forwards arrive
// at the endpoint's proxy naming the service, mapped to the pod's target
// port by the model.
//
// Entry points: Run(ctx, opts...) for the node proxy, RunGateway for the
// east-west gateway. In a cluster, certificates come from
// WithFetcher(csr.NewClient(clientset)).
//
// Programs outside meshctl (bench's interop tests) use it through
// pkg/dataplane/proxy, which re-exports the part they need.
package proxy
