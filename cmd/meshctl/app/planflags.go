package app

import (
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// planFlags describe an environment's clusters. Commands that work from the
// plan alone (values render, ca) have them as up has, so that they see the
// same clusters up creates from the same settings.
type planFlags struct {
	Topology string
	Clusters int // 0: not given (one, or the topology's)
	Networks int // 0: not given (one)
	IPFamily string
}

func (o *planFlags) addFlags(f flags) {
	f.stringVar(&o.Topology, "topology", "", "topology file: Istio's JSON array of clusters (or the same in YAML)")
	// A given count is at least 1: 0 means "not given" to the library.
	f.intVar(&o.Clusters, "clusters", 0, 1, maxClusters, "number of clusters, named cluster1..N (default 1 without --topology)")
	f.intVar(&o.Networks, "networks", 0, 1, maxNetworks, "spread the clusters round-robin over this many networks (default 1)")
	f.stringVar(&o.IPFamily, "ip-family", model.IPv4, "ipv4, ipv6 or dual")
}

// request is the plan's request from these flags; up adds its own.
func (o *planFlags) request(env string) model.Request {
	return model.Request{Env: env, Clusters: o.Clusters, Networks: o.Networks, IPFamily: o.IPFamily}
}
