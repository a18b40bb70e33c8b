package app

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
)

// gatewayFlags configure the east-west gateways of the commands that
// connect an environment (connect, up).
type gatewayFlags struct {
	ControllerImage explicit
	SpeakerImage    explicit
	UpstreamImages  bool
	Timeout         time.Duration
}

func (o *gatewayFlags) addFlags(f flags) {
	f.explicitImageVar(&o.ControllerImage, "metallb-controller-image", gateway.DefaultControllerImage, "MetalLB controller image, for clusters on different networks (side-loaded into the nodes when the docker engine has it)")
	f.explicitImageVar(&o.SpeakerImage, "metallb-speaker-image", gateway.DefaultSpeakerImage, "MetalLB speaker image (side-loaded like the controller's)")
	f.boolVar(&o.UpstreamImages, "metallb-upstream-images", false, "use MetalLB's own images ("+gateway.UpstreamControllerImage+", …): for machines that can pull from quay.io")
	f.durationVar(&o.Timeout, "gateway-timeout", gateway.DefaultTimeout, "per cluster, how long to wait for MetalLB to be ready and then for the east-west gateway's address")
}

// options are the gateway package's options; commands call it before they
// change anything, so a bad combination fails early.
func (o *gatewayFlags) options(log *cli.Logger) ([]gateway.Option, error) {
	opts := []gateway.Option{gateway.WithLogger(log), gateway.WithTimeout(o.Timeout)}
	if o.UpstreamImages {
		if o.ControllerImage.Given || o.SpeakerImage.Given {
			return nil, fmt.Errorf("--metallb-upstream-images and --metallb-controller-image/--metallb-speaker-image: give one or the other")
		}
		return append(opts, gateway.WithUpstreamImages()), nil
	}
	return append(opts, gateway.WithImages(o.ControllerImage.Value, o.SpeakerImage.Value)), nil
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
