package app

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// upOptions are up's flags.
type upOptions struct {
	plan          planFlags
	Workers       int
	Image         string
	NamePrefix    string
	DryRun        bool
	Retain        bool
	Recreate      bool
	Wait          time.Duration
	Connect       bool
	Cacerts       bool
	RemoteSecrets bool
	Install       bool
	install       installFlags
	istio         istioFlags
	values        valuesFlags
	Registry      bool
	RegistryName  string
	RegistryImage string
	RegistryPort  int
	gateways      gatewayFlags
	Output        string
}

func newUpCommand(g *globals) *cobra.Command {
	o := &upOptions{}
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
			plan, err := g.plan(&o.plan, o)
			if err != nil {
				return err
			}
			cfg, err := g.meshConfig(meshFlags{values: &o.values, gateways: &o.gateways, install: &o.install, istio: &o.istio},
				mesh.WithUpOptions(
					cluster.UpWithRetain(o.Retain),
					cluster.UpWithRecreate(o.Recreate),
					cluster.UpWithWait(o.Wait),
				),
				mesh.WithConnect(o.Connect),
				mesh.WithCacerts(o.Cacerts),
				mesh.WithRemoteSecrets(o.RemoteSecrets),
				mesh.WithInstall(o.Install),
			)
			if err != nil {
				return err
			}
			if o.istio.Ambient && !o.Install {
				return errors.New("--istio-ambient runs meshctl's proxy as Istio's ztunnel: it cannot go with --install=false")
			}
			if o.DryRun {
				return print(g.streams.Out, o.Output, newDryRun(plan), func(w io.Writer) error { return printPlan(w, plan) })
			}
			out, err := mesh.NewUp(cfg).Run(cmd.Context(), plan)
			if err != nil {
				return stepHint(err)
			}
			if err := print(g.streams.Out, o.Output, out, func(w io.Writer) error { return printUp(w, out) }); err != nil {
				return err
			}
			if out.Install != nil {
				return out.Install.Err()
			}
			return nil
		},
	}
	f := flags{cmd.Flags()}
	o.plan.addFlags(f)
	f.intVar(&o.Workers, "workers", 0, 0, maxWorkers, "worker nodes per cluster, besides the control-plane node")
	f.imageVar(&o.Image, "image", "", "kind node image (default: kind's)")
	f.stringVar(&o.NamePrefix, "name-prefix", "", `prefix of kind cluster names (default "<env>-", none for the default environment)`)
	f.boolVar(&o.DryRun, "dry-run", false, "print the plan, including each cluster's kind config, and create nothing")
	f.boolVar(&o.Retain, "retain", false, "keep clusters whose creation failed, for debugging")
	f.boolVar(&o.Recreate, "recreate", false, "delete and recreate kind clusters already there that differ from the plan")
	f.durationVar(&o.Wait, "wait", cluster.DefaultWait, "how long to wait for each control plane to be Ready")
	f.boolVar(&o.Connect, "connect", true, "route pods and services between clusters on the same network, and give clusters on different networks MetalLB and an east-west gateway (as meshctl connect does)")
	f.boolVar(&o.Cacerts, "cacerts", true, "give each cluster its intermediate of the environment's shared root CA (istio-system/cacerts; files as meshctl ca makes them)")
	f.boolVar(&o.RemoteSecrets, "remote-secrets", true, "install Istio remote secrets, so that each control plane reads the other clusters (as meshctl connect does)")
	f.boolVar(&o.Install, "install", true, "install meshctl's CNI and HBONE dataplane (as meshctl install does; --install-timeout and the values flags apply)")
	o.install.addFlags(f)
	o.istio.addFlags(f)
	o.values.addFlags(f)
	f.boolVar(&o.Registry, "registry", true, "run a local registry (localhost:<registry-port>) that every node pulls from")
	f.stringVar(&o.RegistryName, "registry-name", model.DefaultRegistryName, "name of the local registry container (nodes reach it as <name>:5000)")
	f.imageVar(&o.RegistryImage, "registry-image", model.DefaultRegistryImage, "image of the local registry container")
	f.intVar(&o.RegistryPort, "registry-port", model.DefaultRegistryPort, 1, 65535, "host port of the local registry")
	o.gateways.addFlags(f)
	addOutputFlag(f, &o.Output)
	return cmd
}

// plan builds and validates the plan from the plan flags and, for up, the
// rest of up's (nil for the commands that have only the plan flags).
func (g *globals) plan(p *planFlags, up *upOptions) (*model.Plan, error) {
	req := p.request(g.opts.Env)
	if up != nil {
		req.Workers = up.Workers
		req.Image = up.Image
		req.Registry = model.Registry{
			Enabled: up.Registry,
			Name:    up.RegistryName,
			Image:   up.RegistryImage,
			Port:    up.RegistryPort,
		}
		if up.NamePrefix != "" {
			req.NamePrefix = &up.NamePrefix
		}
	}
	if p.Topology != "" {
		specs, err := model.LoadTopology(p.Topology)
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
	plan, err := model.NewPlan(req)
	if err != nil {
		return nil, err
	}
	nodes := 0
	for _, c := range plan.Clusters {
		nodes += c.ControlPlanes + c.Workers
	}
	if nodes > maxNodes {
		return nil, fmt.Errorf("the plan has %d nodes: more than the %d meshctl runs on one machine", nodes, maxNodes)
	}
	return plan, nil
}

// dryRun is the plan as -o json|yaml prints it: each cluster with its
// rendered kind config.
type dryRun struct {
	Env      string          `json:"env"`
	Registry model.Registry  `json:"registry"`
	Clusters []dryRunCluster `json:"clusters"`
}

type dryRunCluster struct {
	model.ClusterPlan
	KindConfig *v1alpha4.Cluster `json:"kindConfig,omitempty"` // none for an existing cluster
}

func newDryRun(p *model.Plan) dryRun {
	d := dryRun{Env: p.Env, Registry: p.Registry}
	for _, c := range p.Clusters {
		d.Clusters = append(d.Clusters, dryRunCluster{ClusterPlan: c, KindConfig: kindConfigOf(p, c)})
	}
	return d
}

func printPlan(w io.Writer, p *model.Plan) error {
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
	for _, c := range r.Clusters {
		if len(c.Healed) > 0 {
			fmt.Fprintf(w, "%s %s: %s\n", c.Name, c.Action, strings.Join(c.Healed, "; "))
		}
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
