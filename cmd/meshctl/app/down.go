package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// downOptions are down's flags.
type downOptions struct {
	Registry      bool
	UninstallOnly bool
	RegistryName  string
	install       installFlags // the timeout only
	Output        string
}

func newDownCommand(g *globals) *cobra.Command {
	o := &downOptions{}
	cmd := &cobra.Command{
		Use:   "down [KIND-CLUSTER...]",
		Short: "Delete every kind cluster of an environment; uninstall from existing ones",
		Long: `Delete every kind cluster of the environment, concurrently, with its kubeconfigs.
Named kind clusters are deleted too, even without meshctl's record (clusters
kept with --retain before creation finished). Deleting what is already gone
succeeds. With --registry the local registry container goes too.

Existing clusters (topology entries with meta.kubeconfig) are never deleted:
down removes from them every object meshctl labelled
app.kubernetes.io/managed-by=meshctl (the istio-system/cacerts Secret, the
meshctl-system/meshctl-cluster claim and its namespace), then meshctl's local
kubeconfig copies and record of them. --uninstall-only does the same to the
kind clusters and keeps them.`,
		Example: `  meshctl down
  meshctl down --env ci --registry
  meshctl down --uninstall-only`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.meshConfig(meshFlags{install: &o.install})
			if err != nil {
				return err
			}
			down := mesh.NewDown(cfg)
			if o.Registry {
				down.Registry = o.RegistryName
			}
			down.Clusters, down.UninstallOnly = args, o.UninstallOnly
			res, err := down.Run(cmd.Context(), g.opts.Env)
			if err != nil {
				return err
			}
			return print(g.streams.Out, o.Output, res, func(w io.Writer) error {
				switch {
				case len(res.Deleted) > 0:
					fmt.Fprintf(w, "Deleted %s.\n", strings.Join(res.Deleted, ", "))
				case len(res.Uninstalled) == 0:
					fmt.Fprintf(w, "Environment %q has no clusters: nothing to delete.\n", res.Env)
				}
				printUninstalled(w, res.Uninstalled)
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
	f := flags{cmd.Flags()}
	f.boolVar(&o.Registry, "registry", false, "also delete the local registry container")
	f.boolVar(&o.UninstallOnly, "uninstall-only", false, "keep the kind clusters too: only remove what meshctl installed (as down always does for existing clusters)")
	f.stringVar(&o.RegistryName, "registry-name", model.DefaultRegistryName, "name of the registry container")
	o.install.addTimeoutFlag(f, "how long each chart's uninstall may take (existing clusters, --uninstall-only)")
	addOutputFlag(f, &o.Output)
	return cmd
}
