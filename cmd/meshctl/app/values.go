package app

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/pkg/install/values"
)

func newValuesCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "values",
		Short: "Helm values for the clusters of an environment",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newValuesRenderCommand(g))
	return cmd
}

// valuesRenderOptions are values render's flags.
type valuesRenderOptions struct {
	plan    planFlags
	Cluster string
	values  valuesFlags
	Output  string
}

func newValuesRenderCommand(g *globals) *cobra.Command {
	o := &valuesRenderOptions{}
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Print each cluster's Helm values",
		Long: `Print the Helm values each cluster of the environment is installed with:
global.meshID, global.multiCluster.clusterName, global.network and
global.meshNetworks (every network's clusters as registries and, in a
multi-network mesh, its east-west gateway on port 15443) — and what each
cluster's Istio role needs: a remote (or an external control plane's config
cluster) gets profile: remote, global.remotePilotAddress (its primary's
istiod: --istiod-address, else the primary's east-west gateway) and
istiodRemote.injectionPath; a primary of remotes global.externalIstiod.

Values are merged as Helm merges them, lowest first: the default profile
(pkg/install/values/profiles/default.yaml, embedded), the --profile over it,
the values derived from the plan, each -f file in turn, then each --set. A
null in a file or --set removes a default.

With several clusters, -o yaml prints one YAML document per cluster, each
headed by a comment naming it; -o json prints one object keyed by cluster.`,
		Example: `  meshctl values render --clusters 4 --networks 2
  meshctl values render --topology multicluster.json --cluster cluster2 -o json
  meshctl values render --profile ambient -f mine.yaml --set global.logging.level=debug`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			plan, err := g.plan(&o.plan, nil)
			if err != nil {
				return err
			}
			var only []string
			if o.Cluster != "" {
				only = append(only, o.Cluster)
			}
			out, err := values.New(o.values.rendererOptions()...).Render(plan, only...)
			if err != nil {
				return err
			}
			for _, c := range out {
				for _, n := range c.Notes {
					g.logger.Warnf("%s", n)
				}
			}
			if o.Output == outputJSON {
				return printValuesJSON(g.streams.Out, out)
			}
			return printValuesYAML(g.streams.Out, out)
		},
	}
	f := flags{cmd.Flags()}
	o.plan.addFlags(f)
	f.stringVar(&o.Cluster, "cluster", "", "only this cluster (default: every cluster)")
	o.values.addFlags(f)
	f.outputVar(&o.Output, outputYAML, outputJSON)
	return cmd
}

func printValuesYAML(w io.Writer, clusters []values.Cluster) error {
	for i, c := range clusters {
		b, err := yaml.Marshal(c.Values)
		if err != nil {
			return fmt.Errorf("encoding %s's values: %w", c.Name, err)
		}
		if i > 0 {
			fmt.Fprintln(w, "---")
		}
		fmt.Fprintf(w, "# cluster: %s\n%s", c.Name, b)
	}
	return nil
}

func printValuesJSON(w io.Writer, clusters []values.Cluster) error {
	byName := make(map[string]map[string]any, len(clusters))
	for _, c := range clusters {
		byName[c.Name] = c.Values
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(byName)
}
