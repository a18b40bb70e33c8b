package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// statusOptions are status's flags.
type statusOptions struct {
	RegistryName string
	Check        bool
	Output       string
}

func newStatusCommand(g *globals) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the clusters, nodes, networks and subnets of an environment",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.meshConfig(meshFlags{})
			if err != nil {
				return err
			}
			st := mesh.NewStatus(cfg)
			st.Registry = o.RegistryName
			res, err := st.Run(cmd.Context(), g.opts.Env)
			if err != nil {
				return err
			}
			if err := print(g.streams.Out, o.Output, res, func(w io.Writer) error { return printStatus(w, res) }); err != nil {
				return err
			}
			return statusCheck(res, o.Check)
		},
	}
	f := flags{cmd.Flags()}
	f.stringVar(&o.RegistryName, "registry-name", model.DefaultRegistryName, "name of the registry container")
	f.boolVar(&o.Check, "check", false, "exit 1, naming every problem, unless the environment is Ready (for scripts)")
	addOutputFlag(f, &o.Output)
	return cmd
}

func printStatus(w io.Writer, r *cluster.StatusResult) error {
	if len(r.Clusters) == 0 {
		fmt.Fprintf(w, "Environment %q has no clusters.\n", r.Env)
		return nil
	}
	fmt.Fprintf(w, "Environment %q: %s\n", r.Env, envState(r))
	if r.Registry != nil {
		fmt.Fprintf(w, "Registry %s: %s\n", r.Registry.Name, map[bool]string{true: "running", false: "stopped"}[r.Registry.Running])
	}
	for _, c := range r.Clusters {
		fmt.Fprintf(w, "\n%s (%s): %s\n", c.Name, describeCluster(c.ClusterState), clusterState(c))
		fmt.Fprintf(w, "  network %s, roles %s, pods %s, services %s\n", c.Network, strings.Join(c.Roles, ","),
			strings.Join(c.PodSubnets, ","), strings.Join(c.ServiceSubnets, ","))
		if lb := c.LoadBalancerPools; lb != nil {
			fmt.Fprintf(w, "  load-balancer pools %s (MetalLB, docker network %s)\n", strings.Join(lb.CIDRs, ","), lb.DockerNetwork)
		}
		printDiscovery(w, c.ClusterState)
		for _, p := range c.Problems {
			fmt.Fprintf(w, "  problem: %s\n", p)
		}
		if c.Error != "" {
			if len(c.Problems) == 0 {
				fmt.Fprintf(w, "  error: %s\n", c.Error)
			}
			continue
		}
		t := newTable(w, "  NODE", "ROLE", "READY", "IPS", "POD CIDRS")
		for _, n := range c.Nodes {
			t.row("  "+n.Name, n.Role, fmt.Sprint(n.Ready), strings.Join(n.IPs, ","), strings.Join(n.PodCIDRs, ","))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return nil
}

// statusCheck is the exit of `status --check`: an error listing every
// problem unless the environment is Ready.
func statusCheck(r *cluster.StatusResult, check bool) error {
	if !check || r.Ready {
		return nil
	}
	if len(r.Clusters) == 0 {
		return fmt.Errorf("environment %q has no clusters", r.Env)
	}
	return fmt.Errorf("environment %q is %s:\n  %s", r.Env, cluster.EnvDegraded, strings.Join(r.Problems, "\n  "))
}

// envState is the environment's state line; a report from before states
// (a library user's own StatusResult) falls back to readiness.
func envState(r *cluster.StatusResult) string {
	if r.State != "" {
		return r.State
	}
	return readiness(r.Ready)
}

func clusterState(c cluster.ClusterStatus) string {
	if c.State == "" || c.State == cluster.StateRunning {
		return readiness(c.Ready)
	}
	return strings.ToUpper(c.State)
}

func readiness(ok bool) string {
	if ok {
		return "Ready"
	}
	return "NOT READY"
}
