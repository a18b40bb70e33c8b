package app

import (
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/cluster"
)

// listOptions are list's flags.
type listOptions struct {
	Output string
}

func newListCommand(g *globals) *cobra.Command {
	o := &listOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List kind clusters and the environments they belong to",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := g.provider().List(cmd.Context())
			if err != nil {
				return err
			}
			if all == nil {
				all = []cluster.Listed{}
			}
			return print(g.streams.Out, o.Output, all, func(w io.Writer) error {
				t := newTable(w, "ENV", "CLUSTER", "KIND CLUSTER", "NETWORK", "ROLES")
				for _, e := range all {
					switch {
					case e.Record != nil:
						c := e.Record.Cluster
						t.row(e.Record.Env, c.Name, kindNameOrExisting(c.KindName), c.Network, strings.Join(c.Roles, ","))
					case e.Error != "":
						t.row("?", "-", e.KindName, "-", "error: "+e.Error)
					default:
						t.row("-", "-", e.KindName, "-", "(not created by meshctl)")
					}
				}
				return t.flush()
			})
		},
	}
	addOutputFlag(flags{cmd.Flags()}, &o.Output)
	return cmd
}
