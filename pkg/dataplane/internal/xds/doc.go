// Package xds is the service model's XDS source: a delta ADS client of
// istiod (gRPC DeltaAggregatedResources on 15012, TLS verified with the
// mesh root, the proxy's service-account token as bearer) subscribing, as
// ztunnel does, to type.googleapis.com/istio.workload.Address (workloads
// and services, WDS) and type.googleapis.com/istio.security.Authorization.
//
// Workloads and services feed the model (package model) and policies the
// policy store (package policy), the same ones the standalone source feeds,
// so that outbound routing, secure naming and L4 policy do not depend on
// the source. WDS sends services without endpoints: each workload names
// the services it backs (namespace/hostname → ports), and this package
// joins them. A selector policy arrives without its selector; istiod names
// it in the workloads it selects (Workload.authorization_policies), which
// the model keeps for the policy store's selection.
//
// Like ztunnel's AdsClient: every type is subscribed with a wildcard and
// the node ztunnel~IP~POD.NS~NS.svc.cluster.local with metadata NAME,
// NAMESPACE, INSTANCE_IPS, NODE_NAME, CLUSTER_ID and ISTIO_META_*; each
// response is applied resource by resource and ACKed, or NACKed with
// "name: reason; ..." for the resources refused (which keep their previous
// version and are not reported as held); on reconnect the versions held are
// sent (initial_resource_versions) so istiod sends only changes and
// removals; a connection failure or a gRPC error doubles the backoff from
// 10 ms to 15 s, a stream istiod ends (restart, MaxConnectionAge) is
// reopened at once. The model is synced once each type's first response was
// ACKed.
//
// Differences from ztunnel: no on-demand mode; the wait after a failure to
// connect also ends when the gRPC channel (its own reconnect backoff capped
// at 4 s) turns Ready, so a restarted istiod is found within one channel
// attempt rather than after a backoff that grew while it was away; and a
// policy port above 65535 is refused (NACK) where ztunnel truncates it to
// 16 bits. Workloads
// behind another network's gateway are kept but, as with the standalone
// source, not routed yet.
//
// The messages are encoded and decoded with protowire (as package istioca
// does), so neither istio.io/istio nor go-control-plane is a dependency.
package xds
