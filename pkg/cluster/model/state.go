package model

// ClusterState is a cluster of an environment that is up, as meshctl
// recorded it: the plan it was made from and what meshctl found there. A
// ClusterPlan is what the user asked for; a ClusterState is what is there.
// It is what a Record holds, what Provider.Environment returns, and what
// status reports each cluster's health beside.
type ClusterState struct {
	ClusterPlan
	// Discovery is what Up read of an existing cluster from its API
	// server (the plan's subnets of an existing cluster come from there);
	// nil for a kind cluster.
	Discovery *Discovery `json:"discovery,omitempty"`
}

// Plans returns the plans the clusters were made from, in order: what the
// steps that act on an environment's clusters (routes, gateways, remote
// secrets, values) work from.
func Plans(cs []ClusterState) []ClusterPlan {
	out := make([]ClusterPlan, len(cs))
	for i, c := range cs {
		out[i] = c.ClusterPlan
	}
	return out
}
