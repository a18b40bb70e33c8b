package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/cluster"
)

// statusOptions are status's flags.
type statusOptions struct {
	RegistryName string
	Output       string
}

func newStatusCommand(g *globals) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the clusters, nodes, networks and subnets of an environment",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := g.provider().Status(cmd.Context(), g.opts.Env, o.RegistryName)
			if err != nil {
				return err
			}
			return print(g.streams.Out, o.Output, res, func(w io.Writer) error { return printStatus(w, res) })
		},
	}
	f := flags{cmd.Flags()}
	f.stringVar(&o.RegistryName, "registry-name", cluster.DefaultRegistryName, "name of the registry container")
	addOutputFlag(f, &o.Output)
	return cmd
}

func printStatus(w io.Writer, r *cluster.StatusResult) error {
	if len(r.Clusters) == 0 {
		fmt.Fprintf(w, "Environment %q has no clusters.\n", r.Env)
		return nil
	}
	fmt.Fprintf(w, "Environment %q: %s\n", r.Env, readiness(r.Ready))
	if r.Registry != nil {
		fmt.Fprintf(w, "Registry %s: %s\n", r.Registry.Name, map[bool]string{true: "running", false: "stopped"}[r.Registry.Running])
	}
	for _, c := range r.Clusters {
		fmt.Fprintf(w, "\n%s (%s): %s\n", c.Name, describeCluster(c.ClusterPlan), readiness(c.Ready))
		fmt.Fprintf(w, "  network %s, roles %s, pods %s, services %s\n", c.Network, strings.Join(c.Roles, ","),
			strings.Join(c.PodSubnets, ","), strings.Join(c.ServiceSubnets, ","))
		if lb := c.LoadBalancerPools; lb != nil {
			fmt.Fprintf(w, "  load-balancer pools %s (MetalLB, docker network %s)\n", strings.Join(lb.CIDRs, ","), lb.DockerNetwork)
		}
		printDiscovery(w, c.ClusterPlan)
		if c.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", c.Error)
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

func readiness(ok bool) string {
	if ok {
		return "Ready"
	}
	return "NOT READY"
}
