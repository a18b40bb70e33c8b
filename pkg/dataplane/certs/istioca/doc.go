// Package istioca is a certs.Fetcher that obtains workload certificates from
// istiod's CA the way ztunnel does: a unary gRPC call to
// istio.v1.auth.IstioCertificateService/CreateCertificate (istiod:15012),
// over TLS verified with the mesh root (istio-ca-root-cert), authenticated
// with the node proxy's service-account token (audience istio-ca) and
// asking for each pod's identity through the "ImpersonatedIdentity"
// metadata key, which istiod grants to the node accounts it trusts
// (CA_TRUSTED_NODE_ACCOUNTS) for pods on the caller's own node.
//
// Refresh, backoff and the Initializing/Available/Unavailable states are the
// certs.Manager's; errors are worded as ztunnel's, so config_dump reads
// "Unavailable: signing gRPC error (The service is currently unavailable): …".
//
// istio.io/istio stays out of the build: the two messages are encoded with
// protowire (see ca.proto). The call itself uses grpc-go, which is already
// in meshctl's module graph (through Helm) and is what the XDS client needs
// anyway.
package istioca
