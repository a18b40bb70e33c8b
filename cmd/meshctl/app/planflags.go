package app

import (
	"github.com/spf13/pflag"

	"github.com/meshctl/meshctl/pkg/cluster"
)

// addPlanFlags adds the flags g.plan reads to describe an environment's
// clusters, for commands that work from the plan alone (values render, ca):
// they must see the same clusters `up` creates from the same flags.
func addPlanFlags(f *pflag.FlagSet) {
	f.String("topology", "", "topology file: Istio's JSON array of clusters (or the same in YAML)")
	f.Int("clusters", 0, "number of clusters, named cluster1..N (default 1 without --topology)")
	f.Int("networks", 0, "spread the clusters round-robin over this many networks (default 1)")
	f.String("ip-family", cluster.IPv4, "ipv4, ipv6 or dual")
}
