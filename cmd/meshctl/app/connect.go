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
connects the clusters it creates.

Then every primary gets, for each other cluster, an Istio remote secret
(istio-system/istio-remote-secret-<cluster>) whose kubeconfig reaches that
cluster's API server on the kind network as its reader service account.`,
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
			out := connectOutput{Result: res}
			if g.settings.GetBool("remote-secrets") {
				if out.RemoteSecrets, err = g.remoteSecrets(cmd.Context()); err != nil {
					return fmt.Errorf("routes are in place, but installing remote secrets failed (rerun `meshctl connect`): %w", err)
				}
			}
			return print(g.streams.Out, format, out, func(w io.Writer) error { return printConnectOutput(w, out) })
		},
	}
	cmd.Flags().Bool("remote-secrets", true, "install Istio remote secrets, so that each control plane reads the other clusters (as meshctl remote-secret prints them)")
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

// connectOutput is what connect reports: the routes, and the remote secrets.
type connectOutput struct {
	*connect.Result
	withRemoteSecrets
}

func printConnectOutput(w io.Writer, out connectOutput) error {
	if err := printConnect(w, out.Result); err != nil {
		return err
	}
	if out.RemoteSecrets == nil {
		return nil
	}
	fmt.Fprintln(w)
	return printRemoteSecrets(w, out.RemoteSecrets)
}
