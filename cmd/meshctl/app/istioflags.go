package app

import (
	"github.com/meshctl/meshctl/pkg/install/istio"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// istioFlags are the flags of install and up that install Istio's own
// control plane (pkg/install/istio).
type istioFlags struct {
	Istio  bool
	Charts string
	Hub    string
	Tag    string
}

func (o *istioFlags) addFlags(f flags) {
	f.boolVar(&o.Istio, "istio", false, "also install Istio's own base and istiod charts (releases istio-base and istiod) into every cluster, with the values 'meshctl values render' gives it: primaries first, then remotes")
	f.stringVar(&o.Charts, "istio-charts", "", "directory of Istio's charts, Istio's manifests/charts (default: the download of "+istio.Module+"@"+istio.Version+" by 'go mod download')")
	f.stringVar(&o.Hub, "istio-hub", "", "global.hub of Istio's charts (default: the values' own, else "+istio.DefaultHub+", the offline build of make e2e-env, side-loaded into kind nodes)")
	f.stringVar(&o.Tag, "istio-tag", "", "global.tag of Istio's charts (default: the values' own, else "+istio.DefaultTag()+")")
}

// meshOptions are the builder's options from the flags.
func (o *istioFlags) meshOptions() []mesh.Option {
	if o == nil || !o.Istio {
		return nil
	}
	return []mesh.Option{mesh.WithIstio(o.Charts, istio.Images{Hub: o.Hub, Tag: o.Tag})}
}
