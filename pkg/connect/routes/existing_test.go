package routes

import (
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// An existing cluster gets no routes and gives none, even on a kind
// cluster's network (allowed with meta.podNetworkRoutable): meshctl cannot
// change its nodes, and status errors of its own do not stop the kind
// clusters from being connected.
func TestFromStatusLeavesExistingClustersOut(t *testing.T) {
	t.Parallel()
	node := func(name, ip, cidr string) cluster.NodeStatus {
		return cluster.NodeStatus{Name: name, Role: "control-plane", IPs: []string{ip}, PodCIDRs: []string{cidr}}
	}
	st := &cluster.StatusResult{Clusters: []cluster.ClusterStatus{
		{ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "a", KindName: "a", Network: "n", ServiceSubnets: []string{"10.255.10.0/24"}}}, Nodes: []cluster.NodeStatus{node("a-control-plane", "172.18.0.2", "10.10.0.0/24")}},
		{ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "b", KindName: "b", Network: "n", ServiceSubnets: []string{"10.255.20.0/24"}}}, Nodes: []cluster.NodeStatus{node("b-control-plane", "172.18.0.3", "10.20.0.0/24")}},
		{ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "ext", Existing: true, PodNetworkRoutable: true, Network: "n", ServiceSubnets: []string{"10.96.0.0/12"}}}, Nodes: []cluster.NodeStatus{node("gke-node", "10.0.0.5", "10.4.0.0/24")}},
		{ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "down", Existing: true, Network: "far"}}, Error: "connection refused"},
	}}
	cs, err := FromStatus(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Name != "a" || cs[1].Name != "b" {
		t.Fatalf("clusters %+v, want the kind clusters a and b only", cs)
	}
	plan, err := RoutePlan(cs)
	if err != nil {
		t.Fatal(err)
	}
	for _, nr := range plan {
		for _, r := range nr.Routes {
			if r.Dst.String() == "10.4.0.0/24" || r.Dst.String() == "10.96.0.0/12" {
				t.Errorf("%s: route into the existing cluster: %s", nr.Node, r)
			}
		}
		if len(nr.Routes) != 2 {
			t.Errorf("%s: %d routes, want 2 (the peer's pods and services)", nr.Node, len(nr.Routes))
		}
	}
}
