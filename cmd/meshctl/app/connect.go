package app

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/connect/routes"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// connectOptions are connect's flags.
type connectOptions struct {
	RemoteSecrets bool
	gateways      gatewayFlags
	Output        string
}

func newConnectCommand(g *globals) *cobra.Command {
	o := &connectOptions{}
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
from the top half of the kind docker network (IPv4, and IPv6 when the network
has it), and the east-west gateway Service istio-system/istio-eastwestgateway
(type LoadBalancer, ports 15008 15443 15012 15017 15021), whose external
address is reported. The gateway pods come with the dataplane; the Service
selects app=istio-eastwestgateway, istio=eastwestgateway and
topology.istio.io/network=<network>. ` + "`up`" + ` connects the clusters it creates.

Pools are disjoint across every environment on the docker network: each
cluster's pools are recorded on its control-plane node, a rerun keeps them,
another environment gets blocks no other cluster holds (freed when its
cluster is deleted), and a full subnet is an error that names the
environments holding its blocks.

Then every primary gets, for each other cluster, an Istio remote secret
(istio-system/istio-remote-secret-<cluster>) whose kubeconfig reaches that
cluster's API server on the kind network as its reader service account.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.meshConfig(meshFlags{gateways: &o.gateways}, mesh.WithRemoteSecrets(o.RemoteSecrets))
			if err != nil {
				return err
			}
			res, err := mesh.NewConnect(cfg).Run(cmd.Context(), g.opts.Env)
			if err != nil {
				return stepHint(err)
			}
			out := &connectResult{Result: res.Routes, Gateways: res.Gateways}
			out.RemoteSecrets = res.RemoteSecrets
			return print(g.streams.Out, o.Output, out, func(w io.Writer) error { return printConnectOutput(w, out) })
		},
	}
	f := flags{cmd.Flags()}
	f.boolVar(&o.RemoteSecrets, "remote-secrets", true, "install Istio remote secrets, so that each control plane reads the other clusters (as meshctl remote-secret prints them)")
	o.gateways.addFlags(f)
	addOutputFlag(f, &o.Output)
	return cmd
}

// connectResult is what connect reports: the routes (env, nodes), in a
// multi-network environment each cluster's east-west gateway, and the remote
// secrets.
type connectResult struct {
	*routes.Result
	Gateways []gateway.ClusterResult `json:"gateways"`
	withRemoteSecrets
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
