// Package istioca checks that meshctl's istiod CA client
// (pkg/dataplane/certs/istioca) obtains workload certificates from Istio's
// own CA server (istio.io/istio/security/pkg/server/ca) as ztunnel does:
// Kubernetes JWT authentication, node impersonation, the mesh root.
//
//	cd bench && go test ./istioca
package istioca
