// Package istioxds checks that meshctl's XDS source
// (pkg/dataplane/internal/xds, through proxy.WithXDS) reads istiod's
// ambient XDS as ztunnel does: Istio's own discovery server
// (istio.io/istio/pilot/test/xds, pilot's fake discovery server with the
// ambient index) serves delta ADS over TLS, and the pods, Services,
// AuthorizationPolicies and PeerAuthentications created in its fake
// cluster show up in meshctl's model and policy store.
//
//	cd bench && go test ./istioxds
package istioxds
