package app

import (
	"errors"
	"fmt"

	"github.com/meshctl/meshctl/pkg/install/istio"
	"github.com/meshctl/meshctl/pkg/install/values"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// ambientProfile is the values profile ambient mode installs with
// (pkg/install/values/profiles/ambient.yaml).
const ambientProfile = "ambient"

// istioFlags are the flags of install and up that install Istio's own
// control plane (pkg/install/istio).
type istioFlags struct {
	Istio   bool
	Ambient bool
	Charts  string
	Hub     string
	Tag     string
}

func (o *istioFlags) addFlags(f flags) {
	f.boolVar(&o.Istio, "istio", false, "also install Istio's own base and istiod charts (releases istio-base and istiod) into every cluster, with the values 'meshctl values render' gives it: primaries first, then remotes")
	f.boolVar(&o.Ambient, "istio-ambient", false, "with --istio, install Istio in ambient mode: the ambient values profile (as --profile ambient), then Istio's istio-cni and ztunnel charts, ztunnel running meshctl's proxy (the meshctl-dataplane image); meshctl's own CNI and node agent are not installed")
	f.stringVar(&o.Charts, "istio-charts", "", "directory of Istio's charts, Istio's manifests/charts (default: the download of "+istio.Module+"@"+istio.Version+" by 'go mod download')")
	f.stringVar(&o.Hub, "istio-hub", "", "global.hub of Istio's charts (default: the values' own, else "+istio.DefaultHub+", the offline build of make e2e-env, side-loaded into kind nodes)")
	f.stringVar(&o.Tag, "istio-tag", "", "global.tag of Istio's charts (default: the values' own, else "+istio.DefaultTag()+")")
}

// validate checks the flags together with the values flags v (nil for a
// command without them).
func (o *istioFlags) validate(v *valuesFlags) error {
	if o == nil || !o.Ambient {
		return nil
	}
	if !o.Istio {
		return errors.New("--istio-ambient installs Istio in ambient mode: it needs --istio")
	}
	if v != nil && v.Profile != values.DefaultProfile && v.Profile != ambientProfile {
		return fmt.Errorf("--istio-ambient renders the values with the %s profile: --profile %s cannot go with it", ambientProfile, v.Profile)
	}
	return nil
}

// meshOptions are the builder's options from the flags.
func (o *istioFlags) meshOptions() []mesh.Option {
	if o == nil || !o.Istio {
		return nil
	}
	opts := []mesh.Option{mesh.WithIstio(o.Charts, istio.Images{Hub: o.Hub, Tag: o.Tag})}
	if o.Ambient {
		// After the values flags' own options: the profile is ambient's.
		opts = append(opts, mesh.WithIstioAmbient(true), mesh.WithValues(values.WithProfile(ambientProfile)))
	}
	return opts
}
