package app

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/pkg/connect"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
)

func newConnectCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "connect",
		Short: "Route clusters on one network to each other; give clusters on different networks east-west gateways",
		Long: `Route every node of every cluster to the pod CIDRs (each node's, IPv4 and
IPv6) and service CIDRs of the other clusters on its network: one batched
'ip route replace' per node, so it is idempotent and cheap to rerun — after
adding a cluster, say.

Clusters on different networks get no routes: in an environment with more than
one network, every cluster gets MetalLB (L2 mode; its images side-loaded into
the nodes when the docker engine has them), an address pool of its own carved
from the top of the kind docker network (IPv4, and IPv6 when the network has
it), and the east-west gateway Service istio-system/istio-eastwestgateway
(type LoadBalancer, ports 15008 15443 15012 15017 15021), whose external
address is reported. The gateway pods come with the dataplane; the Service
selects app=istio-eastwestgateway, istio=eastwestgateway and
topology.istio.io/network=<network>. ` + "`up`" + ` connects the clusters it creates.

Then every primary gets, for each other cluster, an Istio remote secret
(istio-system/istio-remote-secret-<cluster>) whose kubeconfig reaches that
cluster's API server on the kind network as its reader service account.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := g.outputFormat()
			if err != nil {
				return err
			}
			gwOpts, err := g.gatewayOptions()
			if err != nil {
				return err
			}
			res, err := g.connect(cmd.Context(), gwOpts)
			if err != nil {
				return err
			}
			out := res
			if g.settings.GetBool("remote-secrets") {
				if out.RemoteSecrets, err = g.remoteSecrets(cmd.Context()); err != nil {
					return fmt.Errorf("routes are in place, but installing remote secrets failed (rerun `meshctl connect`): %w", err)
				}
			}
			return print(g.streams.Out, format, out, func(w io.Writer) error { return printConnectOutput(w, out) })
		},
	}
	cmd.Flags().Bool("remote-secrets", true, "install Istio remote secrets, so that each control plane reads the other clusters (as meshctl remote-secret prints them)")
	addGatewayFlags(cmd.Flags())
	addOutputFlag(cmd)
	return cmd
}

// connectResult is what connect reports: the routes (env, nodes), in a
// multi-network environment each cluster's east-west gateway, and the remote
// secrets.
type connectResult struct {
	*connect.Result
	Gateways []gateway.ClusterResult `json:"gateways"`
	withRemoteSecrets
}

// connect routes the clusters of each network to each other, as one status
// step, then gives the clusters of a multi-network environment their
// gateways.
func (g *globals) connect(ctx context.Context, gwOpts []gateway.Option) (*connectResult, error) {
	p := g.provider()
	status := cli.NewStatus(g.logger)
	status.Start("Connecting clusters on the same network")
	res, err := connect.New(p, p, connect.WithLogger(g.logger)).Connect(ctx, g.settings.GetString("env"))
	status.End(err == nil)
	if err != nil {
		return nil, err
	}
	gws, err := g.gateways(ctx, gwOpts)
	if err != nil {
		return nil, err
	}
	return &connectResult{Result: res, Gateways: gws.Clusters}, nil
}

func printConnect(w io.Writer, r *connectResult) error {
	t := newTable(w, "CLUSTER", "NODE", "ROUTES")
	for _, n := range r.Nodes {
		t.row(n.Cluster, n.Node, fmt.Sprint(len(n.Routes)))
	}
	if err := t.flush(); err != nil {
		return err
	}
	return printGateways(w, &gateway.Result{Clusters: r.Gateways})
}

func printConnectOutput(w io.Writer, out *connectResult) error {
	if err := printConnect(w, out); err != nil {
		return err
	}
	if out.RemoteSecrets == nil {
		return nil
	}
	fmt.Fprintln(w)
	return printRemoteSecrets(w, out.RemoteSecrets)
}
