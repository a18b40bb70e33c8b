package app

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// topologyOptions are topology's flags.
type topologyOptions struct {
	Internal bool
	Output   string
}

func newTopologyCommand(g *globals) *cobra.Command {
	o := &topologyOptions{}
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Print the environment's topology for Istio's test framework",
		Long: `Print the environment's clusters in Istio's topology format — kind,
clusterName, podSubnet, svcSubnet, network, primaryClusterName,
configClusterName and meta.kubeconfig — the file Istio's integration tests take
with --istio.test.kube.topology (integ-suite-kind.sh's
INTEGRATION_TEST_TOPOLOGY_FILE). 'meshctl up' writes the same into
<artifacts>/<env>/topology.json, and with the internal kubeconfigs into
topology-internal.json.

meta.kubeconfig is each cluster's host kubeconfig; with --internal, the one
whose server is the control-plane container's IP on the kind network, for a
test that runs in a container on that network.`,
		Example: `  meshctl up --topology multicluster.json
  go test -tags=integ ./tests/integration/pilot/... --istio.test.kube.topology=$PWD/_artifacts/default/topology.json
  meshctl topology --env ci --internal > /tmp/topology.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env := g.opts.Env
			p := g.provider()
			cs, err := p.Environment(cmd.Context(), env)
			if err != nil {
				return err
			}
			if len(cs) == 0 {
				return fmt.Errorf("environment %q has no clusters (create it with `meshctl up`)", env)
			}
			t, err := p.IstioTopology(env, model.Plans(cs), o.Internal)
			if err != nil {
				return err
			}
			return print(g.streams.Out, o.Output, t, nil)
		},
	}
	f := flags{cmd.Flags()}
	f.boolVar(&o.Internal, "internal", false, "meta.kubeconfig is each cluster's internal kubeconfig (server on the kind network)")
	f.outputVar(&o.Output, outputJSON, outputYAML)
	return cmd
}
