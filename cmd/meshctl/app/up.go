package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/mesh"
)

func newUpCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Create (or reuse) the clusters of an environment",
		Long: `Create the clusters of an environment in parallel, or reuse those that
already exist as planned. Clusters are named cluster1..N (prefixed with
"<env>-" outside the default environment) unless a topology names them.

A failed creation exports each cluster's logs into the artifacts directory
and deletes what this run created, unless --retain. Ctrl-C does the same.`,
		Example: `  meshctl up --clusters 3
  meshctl up --clusters 4 --networks 2 --workers 1 --ip-family dual
  meshctl up --topology multicluster.json --dry-run -o yaml
  meshctl up --env ci --config meshctl.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := g.outputFormat()
			if err != nil {
				return err
			}
			plan, err := g.plan()
			if err != nil {
				return err
			}
			b, err := g.builder(cmd,
				mesh.WithUpOptions(
					cluster.UpWithRetain(g.settings.GetBool("retain")),
					cluster.UpWithRecreate(g.settings.GetBool("recreate")),
					cluster.UpWithWait(g.settings.GetDuration("wait")),
				),
				mesh.WithConnect(g.settings.GetBool("connect")),
				mesh.WithCacerts(g.settings.GetBool("cacerts")),
				mesh.WithRemoteSecrets(g.settings.GetBool("remote-secrets")),
				mesh.WithInstall(g.settings.GetBool("install")),
			)
			if err != nil {
				return err
			}
			if g.settings.GetBool("dry-run") {
				return print(g.streams.Out, format, newDryRun(plan), func(w io.Writer) error { return printPlan(w, plan) })
			}
			out, err := b.Up(cmd.Context(), plan)
			if err != nil {
				return stepHint(err)
			}
			if err := print(g.streams.Out, format, out, func(w io.Writer) error { return printUp(w, out) }); err != nil {
				return err
			}
			if out.Install != nil {
				return installFailed(out.Install)
			}
			return nil
		},
	}
	f := cmd.Flags()
	addPlanFlags(f)
	f.Int("workers", 0, "worker nodes per cluster, besides the control-plane node")
	f.String("image", "", "kind node image (default: kind's)")
	f.String("name-prefix", "", `prefix of kind cluster names (default "<env>-", none for the default environment)`)
	f.Bool("dry-run", false, "print the plan, including each cluster's kind config, and create nothing")
	f.Bool("retain", false, "keep clusters whose creation failed, for debugging")
	f.Bool("recreate", false, "delete and recreate existing clusters that differ from the plan")
	f.Duration("wait", cluster.DefaultWait, "how long to wait for each control plane to be Ready")
	f.Bool("connect", true, "route pods and services between clusters on the same network, and give clusters on different networks MetalLB and an east-west gateway (as meshctl connect does)")
	f.Bool("cacerts", true, "give each cluster its intermediate of the environment's shared root CA (istio-system/cacerts; files as meshctl ca makes them)")
	f.Bool("remote-secrets", true, "install Istio remote secrets, so that each control plane reads the other clusters (as meshctl connect does)")
	f.Bool("install", true, "install meshctl's CNI and HBONE dataplane (as meshctl install does; --install-timeout and the values flags apply)")
	addInstallFlags(f)
	addValuesFlags(f)
	f.Bool("registry", true, "run a local registry (localhost:<registry-port>) that every node pulls from")
	f.String("registry-name", cluster.DefaultRegistryName, "name of the local registry container (nodes reach it as <name>:5000)")
	f.String("registry-image", cluster.DefaultRegistryImage, "image of the local registry container")
	f.Int("registry-port", cluster.DefaultRegistryPort, "host port of the local registry")
	addGatewayFlags(f)
	addOutputFlag(cmd)
	return cmd
}

// plan builds and validates the plan from flags, environment and files.
func (g *globals) plan() (*cluster.Plan, error) {
	s := g.settings
	// 0 means "not given" to the library (a topology sets the count); a 0
	// the user did give is a mistake worth saying so.
	for _, k := range []string{"clusters", "networks"} {
		if s.IsSet(k) && s.GetInt(k) < 1 {
			return nil, fmt.Errorf("--%s must be at least 1, got %d", k, s.GetInt(k))
		}
	}
	req := cluster.Request{
		Env:      s.GetString("env"),
		Clusters: s.GetInt("clusters"),
		Networks: s.GetInt("networks"),
		Workers:  s.GetInt("workers"),
		IPFamily: s.GetString("ip-family"),
		Image:    s.GetString("image"),
		Registry: cluster.Registry{
			Enabled: s.GetBool("registry"),
			Name:    s.GetString("registry-name"),
			Image:   s.GetString("registry-image"),
			Port:    s.GetInt("registry-port"),
		},
	}
	if p := s.GetString("name-prefix"); p != "" {
		req.NamePrefix = &p
	}
	if path := s.GetString("topology"); path != "" {
		specs, err := cluster.LoadTopology(path)
		if err != nil {
			return nil, err
		}
		req.Specs = specs
		for _, sp := range specs {
			for _, w := range sp.Warnings {
				g.logger.Warnf("%s", w)
			}
		}
	}
	return cluster.NewPlan(req)
}

// dryRun is the plan as -o json|yaml prints it: each cluster with its
// rendered kind config.
type dryRun struct {
	Env      string           `json:"env"`
	Registry cluster.Registry `json:"registry"`
	Clusters []dryRunCluster  `json:"clusters"`
}

type dryRunCluster struct {
	cluster.ClusterPlan
	KindConfig *v1alpha4.Cluster `json:"kindConfig,omitempty"` // none for an existing cluster
}

func newDryRun(p *cluster.Plan) dryRun {
	d := dryRun{Env: p.Env, Registry: p.Registry}
	for _, c := range p.Clusters {
		d.Clusters = append(d.Clusters, dryRunCluster{ClusterPlan: c, KindConfig: kindConfigOf(p, c)})
	}
	return d
}

func printPlan(w io.Writer, p *cluster.Plan) error {
	reg := "no local registry"
	if p.Registry.Enabled {
		reg = fmt.Sprintf("registry %s on localhost:%d (image %s)", p.Registry.Name, p.Registry.Port, p.Registry.Image)
	}
	fmt.Fprintf(w, "Environment %q: %d cluster(s), %s. Nothing is created (--dry-run).\n", p.Env, len(p.Clusters), reg)
	for _, c := range p.Clusters {
		if c.Existing {
			printExistingPlan(w, c)
			continue
		}
		cfg, err := p.KindConfigYAML(c)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\n%s (kind cluster %s)\n", c.Name, c.KindName)
		fmt.Fprintf(w, "  network:          %s\n", c.Network)
		fmt.Fprintf(w, "  roles:            %s", strings.Join(c.Roles, ", "))
		if c.PrimaryClusterName != c.Name {
			fmt.Fprintf(w, " (primary: %s)", c.PrimaryClusterName)
		}
		if c.ConfigClusterName != c.PrimaryClusterName {
			fmt.Fprintf(w, " (config: %s)", c.ConfigClusterName)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  ip family:        %s\n", c.IPFamily)
		fmt.Fprintf(w, "  pod subnets:      %s\n", strings.Join(c.PodSubnets, ", "))
		fmt.Fprintf(w, "  service subnets:  %s\n", strings.Join(c.ServiceSubnets, ", "))
		fmt.Fprintf(w, "  nodes:            %d control-plane, %d worker(s)\n", c.ControlPlanes, c.Workers)
		fmt.Fprintf(w, "  image:            %s\n", c.Image)
		fmt.Fprintf(w, "  kind config:\n    %s\n", strings.ReplaceAll(strings.TrimSpace(string(cfg)), "\n", "\n    "))
	}
	return nil
}

func printUp(w io.Writer, out *mesh.Result) error {
	r := out.UpResult
	if r.Registry != nil {
		fmt.Fprintf(w, "Registry %s at %s (%s)\n", r.Registry.Name, r.Registry.Host, r.Registry.Action)
	}
	fmt.Fprintf(w, "Environment %q:\n", r.Env)
	tw := newTable(w, "CLUSTER", "KIND CLUSTER", "NETWORK", "ACTION", "KUBECONFIG")
	for _, c := range r.Clusters {
		tw.row(c.Name, kindNameOrExisting(c.KindName), c.Network, c.Action, c.Kubeconfig)
	}
	if err := tw.flush(); err != nil {
		return err
	}
	if err := printGateways(w, &gateway.Result{Clusters: out.Gateways}); err != nil {
		return err
	}
	if out.RemoteSecrets != nil && len(out.RemoteSecrets.Secrets) > 0 {
		fmt.Fprintln(w)
		if err := printRemoteSecrets(w, out.RemoteSecrets); err != nil {
			return err
		}
	}
	if out.Install != nil {
		fmt.Fprintln(w)
		return printInstall(w, out.Install)
	}
	return nil
}
