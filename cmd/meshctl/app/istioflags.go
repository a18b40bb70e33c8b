package app

import (
	"github.com/spf13/pflag"

	"github.com/meshctl/meshctl/pkg/install/istio"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// addIstioFlags adds the flags of install and up that install Istio's own
// control plane (pkg/install/istio).
func addIstioFlags(f *pflag.FlagSet) {
	f.Bool("istio", false, "also install Istio's own base and istiod charts (releases istio-base and istiod) into every cluster, with the values 'meshctl values render' gives it: primaries first, then remotes")
	f.String("istio-charts", "", "directory of Istio's charts, Istio's manifests/charts (default: the download of "+istio.Module+"@"+istio.Version+" by 'go mod download')")
	f.String("istio-hub", "", "global.hub of Istio's charts (default: the values' own, else "+istio.DefaultHub+", the offline build of make e2e-env, side-loaded into kind nodes)")
	f.String("istio-tag", "", "global.tag of Istio's charts (default: the values' own, else "+istio.DefaultTag()+")")
}

// istioOptions are the builder's options from addIstioFlags'.
func (g *globals) istioOptions() []mesh.Option {
	s := g.settings
	if !s.GetBool("istio") {
		return nil
	}
	return []mesh.Option{mesh.WithIstio(s.GetString("istio-charts"), istio.Images{Hub: s.GetString("istio-hub"), Tag: s.GetString("istio-tag")})}
}
