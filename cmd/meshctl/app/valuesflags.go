package app

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshctl/meshctl/pkg/install/values"
)

// addValuesFlags adds the flags valuesOptions reads: `values render` prints
// exactly the values `install` installs from the same flags.
func addValuesFlags(f *pflag.FlagSet) {
	f.StringArrayP("values", "f", nil, "values file to merge, as helm -f (repeatable; later files win)")
	f.StringArray("set", nil, "value to set, as helm --set: a.b=1,c={x,y} (repeatable; applied after every file)")
	f.String("profile", values.DefaultProfile, "values profile (values/<name>.yaml), e.g. default or ambient")
	f.String("mesh-id", values.DefaultMeshID, "global.meshID")
	f.StringArray("gateway-address", nil, "known address of a network's east-west gateway, NETWORK=ADDRESS (repeatable): used instead of the gateway service")
	f.StringArray("istiod-address", nil, "address a primary's remotes reach its istiod at, PRIMARY=ADDRESS (repeatable): their global.remotePilotAddress (default: the primary's east-west gateway)")
}

// valuesOptions builds the values renderer's options from addValuesFlags'.
func (g *globals) valuesOptions(cmd *cobra.Command) ([]values.Option, error) {
	opts := []values.Option{
		values.WithProfile(g.settings.GetString("profile")),
		values.WithMeshID(g.settings.GetString("mesh-id")),
		values.WithFiles(g.stringArray(cmd, "values")...),
		values.WithSet(g.stringArray(cmd, "set")...),
	}
	for _, gw := range g.stringArray(cmd, "gateway-address") {
		network, addr, ok := strings.Cut(gw, "=")
		if !ok || network == "" || addr == "" {
			return nil, fmt.Errorf("--gateway-address %q: want NETWORK=ADDRESS", gw)
		}
		opts = append(opts, values.WithGatewayAddress(network, addr))
	}
	for _, ia := range g.stringArray(cmd, "istiod-address") {
		primary, addr, ok := strings.Cut(ia, "=")
		if !ok || primary == "" || addr == "" {
			return nil, fmt.Errorf("--istiod-address %q: want PRIMARY=ADDRESS", ia)
		}
		opts = append(opts, values.WithIstiodAddress(primary, addr))
	}
	return opts, nil
}
