// Package istiocharts checks meshctl against Istio's own Helm charts, read
// from the istio.io/istio module this module pins (never copied into the
// repository): the objects meshctl creates take no name Istio's base and
// istiod charts own, and the values `meshctl values render` gives each
// cluster make Istio's istiod chart install that cluster's Istio role.
//
//	cd bench && go test ./istiocharts
package istiocharts
