package app

import (
	"github.com/spf13/cobra"
)

// kubeconfigOptions are kubeconfig's flags.
type kubeconfigOptions struct {
	Internal bool
}

func newKubeconfigCommand(g *globals) *cobra.Command {
	o := &kubeconfigOptions{}
	cmd := &cobra.Command{
		Use:   "kubeconfig CLUSTER",
		Short: "Print a cluster's kubeconfig (context named after the cluster)",
		Long: `Print a cluster's kubeconfig, read from the cluster. With --internal the
server is the control-plane container's IP on the kind network, reachable from
the host and from other containers (other clusters' control planes).`,
		Example: `  meshctl kubeconfig cluster1 > /tmp/c1 && kubectl --kubeconfig /tmp/c1 get nodes
  meshctl kubeconfig --internal cluster2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := g.provider().Kubeconfig(cmd.Context(), g.opts.Env, args[0], o.Internal)
			if err != nil {
				return err
			}
			_, err = g.streams.Out.Write(data)
			return err
		},
	}
	flags{cmd.Flags()}.boolVar(&o.Internal, "internal", false, "address the API server by its IP on the kind docker network")
	return cmd
}
