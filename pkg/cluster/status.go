package cluster

import (
	"context"
	"strings"

	"github.com/meshctl/meshctl/internal/parallel"
)

// StatusResult is an environment's state as `meshctl status` reports it.
type StatusResult struct {
	Env      string          `json:"env"`
	Ready    bool            `json:"ready"`
	Clusters []ClusterStatus `json:"clusters"`
	Registry *RegistryStatus `json:"registry,omitempty"`
}

// ClusterStatus is one cluster's plan and live state.
type ClusterStatus struct {
	ClusterPlan
	// LoadBalancerPools are the MetalLB address pools meshctl gave a kind
	// cluster (on environments of several networks), as recorded: where
	// the east-west gateway's address, and those of any LoadBalancer
	// Service a developer adds, come from. Unset when it has none.
	LoadBalancerPools *Pools       `json:"loadBalancerPools,omitempty"`
	Ready             bool         `json:"ready"`
	Nodes             []NodeStatus `json:"nodes"`
	Error             string       `json:"error,omitempty"`
}

// RegistryStatus is the local registry container's state.
type RegistryStatus struct {
	Name    string `json:"name"`
	Running bool   `json:"running"`
}

// Status reads the state of every cluster of env from its API server,
// concurrently. A cluster that cannot be read is reported, not fatal: status
// is what a person runs when something is wrong.
func (p *Provider) Status(ctx context.Context, env, registry string) (*StatusResult, error) {
	recs, err := p.records(ctx, env)
	if err != nil {
		return nil, err
	}
	res := &StatusResult{Env: env, Clusters: make([]ClusterStatus, len(recs)), Ready: len(recs) > 0}
	_ = parallel.ForEach(indexes(len(recs)), func(i int) error {
		res.Clusters[i] = p.clusterStatus(ctx, recs[i].Cluster)
		// A record written before gateways ran holds empty pools: the
		// same as none to a reader.
		if pools := recs[i].Pools; pools != nil && len(pools.CIDRs) > 0 {
			res.Clusters[i].LoadBalancerPools = pools
		}
		return nil
	})
	for _, c := range res.Clusters {
		res.Ready = res.Ready && c.Ready
	}
	if registry != "" {
		out, err := p.docker.Run(ctx, "inspect", "--format", "{{.State.Running}}", registry)
		if err == nil || !strings.Contains(err.Error(), "No such") {
			res.Registry = &RegistryStatus{Name: registry, Running: err == nil && strings.TrimSpace(string(out)) == "true"}
		}
	}
	return res, nil
}

func (p *Provider) clusterStatus(ctx context.Context, c ClusterPlan) ClusterStatus {
	st := ClusterStatus{ClusterPlan: c, Nodes: []NodeStatus{}}
	var kc []byte
	var err error
	if c.Existing {
		// Read through the user's kubeconfig, not meshctl's copy: it
		// is the one whose credentials the user keeps fresh.
		kc, err = p.kubeconfig(c, false)
	} else {
		var raw string
		raw, err = p.kind.KubeConfig(c.KindName, false)
		kc = []byte(raw)
	}
	if err != nil {
		st.Error = "reading kubeconfig: " + err.Error()
		return st
	}
	ns, err := p.nodes.Nodes(ctx, kc)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	st.Nodes = ns
	st.Ready = len(ns) == c.ControlPlanes+c.Workers
	if c.Existing {
		// Its size is its owner's; a cluster without nodes runs nothing.
		st.Ready = len(ns) > 0
	}
	for _, n := range ns {
		st.Ready = st.Ready && n.Ready
	}
	return st
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
