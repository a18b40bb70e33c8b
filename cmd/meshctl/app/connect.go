package app

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/pkg/connect"
)

func newConnectCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "connect",
		Short: "Route pods and services between the clusters of an environment",
		Long: `Route every node of every cluster to the pod CIDRs (each node's, IPv4 and
IPv6) and service CIDRs of the other clusters on its network: one batched
'ip route replace' per node, so it is idempotent and cheap to rerun — after
adding a cluster, say. Clusters on different networks get no routes. ` + "`up`" + `
connects the clusters it creates.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := g.outputFormat()
			if err != nil {
				return err
			}
			res, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			return print(g.streams.Out, format, res, func(w io.Writer) error { return printConnect(w, res) })
		},
	}
	addOutputFlag(cmd)
	return cmd
}

// connect runs the connector on the environment, as one status step.
func (g *globals) connect(ctx context.Context) (*connect.Result, error) {
	p := g.provider()
	status := cli.NewStatus(g.logger)
	status.Start("Connecting clusters on the same network")
	res, err := connect.New(p, p, connect.WithLogger(g.logger)).Connect(ctx, g.settings.GetString("env"))
	status.End(err == nil)
	return res, err
}

func printConnect(w io.Writer, r *connect.Result) error {
	t := newTable(w, "CLUSTER", "NODE", "ROUTES")
	for _, n := range r.Nodes {
		t.row(n.Cluster, n.Node, fmt.Sprint(len(n.Routes)))
	}
	return t.flush()
}
