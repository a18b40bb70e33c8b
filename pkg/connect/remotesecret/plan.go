package remotesecret

import (
	"sort"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// pair is one remote secret to write: in target, giving access to source.
type pair struct {
	source, target string
}

// isPrimary: the cluster runs a control plane.
func isPrimary(c model.ClusterPlan) bool { return c.PrimaryClusterName == c.Name }

// isRemote: the cluster named has its control plane in another cluster.
func isRemote(cs []model.ClusterPlan, name string) bool {
	for _, c := range cs {
		if c.Name == name {
			return c.PrimaryClusterName != "" && !isPrimary(c)
		}
	}
	return false
}

// isConfig: the cluster holds its own mesh config.
func isConfig(c model.ClusterPlan) bool { return c.ConfigClusterName == c.Name }

// isExternalControlPlane: a primary whose mesh config lives in another
// cluster. It runs istiod for others and is not itself part of the mesh.
func isExternalControlPlane(c model.ClusterPlan) bool { return isPrimary(c) && !isConfig(c) }

// plan lists the remote secrets an environment needs, as Istio's test
// framework places them: every control plane (primary) learns about every
// other mesh cluster, which includes its own remotes. An external control
// plane is no mesh cluster, so no secret gives access to it, and it gets no
// secret for its config cluster (istiod reaches that through its own
// kubeconfig, not a remote secret). Sorted by target, then source.
func plan(cs []model.ClusterPlan) []pair {
	var out []pair
	for _, t := range cs {
		if !isPrimary(t) {
			continue
		}
		for _, s := range cs {
			switch {
			case s.Name == t.Name, isExternalControlPlane(s):
				continue
			case isExternalControlPlane(t) && isConfig(s):
				continue
			}
			out = append(out, pair{source: s.Name, target: t.Name})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].target != out[j].target {
			return out[i].target < out[j].target
		}
		return out[i].source < out[j].source
	})
	return out
}
