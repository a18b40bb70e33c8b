package app

import (
	"github.com/meshctl/meshctl/pkg/install/values"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// valuesFlags configure the values renderer: `values render` prints exactly
// the values `install` installs from the same settings.
type valuesFlags struct {
	Files            []string
	Sets             []string
	Profile          string
	MeshID           string
	GatewayAddresses []gatewayAddress
	IstiodAddresses  []gatewayAddress
}

func (o *valuesFlags) addFlags(f flags) {
	f.stringArrayVarP(&o.Files, "values", "f", "values file to merge, as helm -f (repeatable; later files win)")
	f.stringArrayVarP(&o.Sets, "set", "", "value to set, as helm --set: a.b=1,c={x,y} (repeatable; applied after every file)")
	f.stringVar(&o.Profile, "profile", values.DefaultProfile, "values profile (values/<name>.yaml), e.g. default or ambient")
	f.stringVar(&o.MeshID, "mesh-id", values.DefaultMeshID, "global.meshID")
	f.add(&gatewayAddressValue{p: &o.GatewayAddresses}, "gateway-address", "", "known address of a network's east-west gateway, NETWORK=ADDRESS (repeatable): used instead of the gateway service")
	f.add(&gatewayAddressValue{p: &o.IstiodAddresses, key: "PRIMARY"}, "istiod-address", "", "address a primary's remotes reach its istiod at, PRIMARY=ADDRESS (repeatable): their global.remotePilotAddress (default: the primary's east-west gateway)")
}

// rendererOptions are the values renderer's options.
func (o *valuesFlags) rendererOptions() []values.Option {
	opts := []values.Option{
		values.WithProfile(o.Profile),
		values.WithMeshID(o.MeshID),
		values.WithFiles(o.Files...),
		values.WithSet(o.Sets...),
	}
	for _, gw := range o.GatewayAddresses {
		opts = append(opts, values.WithGatewayAddress(gw.Network, gw.Address))
	}
	for _, ia := range o.IstiodAddresses {
		opts = append(opts, values.WithIstiodAddress(ia.Network, ia.Address))
	}
	return opts
}

// meshOptions are pkg/mesh's options: the values, and the given gateway
// addresses as such too, so the gateways connect discovers never override
// them.
func (o *valuesFlags) meshOptions() []mesh.Option {
	opts := []mesh.Option{mesh.WithValues(o.rendererOptions()...)}
	for _, gw := range o.GatewayAddresses {
		opts = append(opts, mesh.WithGatewayAddress(gw.Network, gw.Address))
	}
	return opts
}
