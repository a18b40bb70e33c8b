package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/meshctl/meshctl/pkg/connect/gateway"
)

// addGatewayFlags adds the flags g.gateways reads, for the commands that
// connect an environment (connect, up).
func addGatewayFlags(f *pflag.FlagSet) {
	f.String("metallb-controller-image", gateway.DefaultControllerImage, "MetalLB controller image, for clusters on different networks (side-loaded into the nodes when the docker engine has it)")
	f.String("metallb-speaker-image", gateway.DefaultSpeakerImage, "MetalLB speaker image (side-loaded like the controller's)")
	f.Bool("metallb-upstream-images", false, "use MetalLB's own images ("+gateway.UpstreamControllerImage+", …): for machines that can pull from quay.io")
	f.Duration("gateway-timeout", gateway.DefaultTimeout, "per cluster, how long to wait for MetalLB to be ready and then for the east-west gateway's address")
}

// gatewayOptions reads the gateway flags; commands call it before they
// change anything, so a bad combination fails early.
func (g *globals) gatewayOptions() ([]gateway.Option, error) {
	s := g.settings
	opts := []gateway.Option{gateway.WithLogger(g.logger), gateway.WithTimeout(s.GetDuration("gateway-timeout"))}
	if s.GetBool("metallb-upstream-images") {
		if s.IsSet("metallb-controller-image") || s.IsSet("metallb-speaker-image") {
			return nil, fmt.Errorf("--metallb-upstream-images and --metallb-controller-image/--metallb-speaker-image: give one or the other")
		}
		return append(opts, gateway.WithUpstreamImages()), nil
	}
	return append(opts, gateway.WithImages(s.GetString("metallb-controller-image"), s.GetString("metallb-speaker-image"))), nil
}

func printGateways(w io.Writer, r *gateway.Result) error {
	if r == nil || len(r.Clusters) == 0 {
		return nil
	}
	fmt.Fprintln(w, "East-west gateways:")
	t := newTable(w, "CLUSTER", "NETWORK", "GATEWAY", "POOLS")
	for _, c := range r.Clusters {
		t.row(c.Cluster, c.Network, strings.Join(c.Addresses, ","), strings.Join(c.Pools, ","))
	}
	return t.flush()
}
