package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/cluster"
)

func newDownCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "down [KIND-CLUSTER...]",
		Short: "Delete every cluster of an environment",
		Long: `Delete every cluster of the environment, concurrently, with its kubeconfigs.
Named kind clusters are deleted too, even without meshctl's record (clusters
kept with --retain before creation finished). Deleting what is already gone
succeeds. With --registry the local registry container goes too.`,
		Example: `  meshctl down
  meshctl down --env ci --registry`,
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := g.outputFormat()
			if err != nil {
				return err
			}
			var opts []cluster.DownOption
			if g.settings.GetBool("registry") {
				opts = append(opts, cluster.DownWithRegistry(g.settings.GetString("registry-name")))
			}
			opts = append(opts, cluster.DownWithClusters(args...))
			res, err := g.provider().Down(cmd.Context(), g.settings.GetString("env"), opts...)
			if err != nil {
				return err
			}
			return print(g.streams.Out, format, res, func(w io.Writer) error {
				if len(res.Deleted) == 0 {
					fmt.Fprintf(w, "Environment %q has no clusters: nothing to delete.\n", res.Env)
				} else {
					fmt.Fprintf(w, "Deleted %s.\n", strings.Join(res.Deleted, ", "))
				}
				if res.Registry != "" {
					fmt.Fprintf(w, "Deleted registry %s.\n", res.Registry)
				}
				if res.Network != "" {
					fmt.Fprintf(w, "Deleted docker network %s.\n", res.Network)
				}
				return nil
			})
		},
	}
	cmd.Flags().Bool("registry", false, "also delete the local registry container")
	cmd.Flags().String("registry-name", cluster.DefaultRegistryName, "name of the registry container")
	addOutputFlag(cmd)
	return cmd
}
