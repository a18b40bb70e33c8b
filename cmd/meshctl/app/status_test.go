package app

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// statusFixture is a two-network environment as Status reports it after
// `up`: cluster1 got its load-balancer pools (dual-stack), cluster2's
// API server does not answer, and cluster3 is an existing cluster, which
// has no pools (its own load balancer gives its gateway an address).
func statusFixture() *cluster.StatusResult {
	return &cluster.StatusResult{Env: "dev", State: cluster.EnvDegraded, Registry: &cluster.RegistryStatus{Name: "kind-registry", Running: true},
		Problems: []string{`cluster "cluster2": API server unreachable: Get "https://127.0.0.1:40002/api/v1/nodes": connection refused`},
		Clusters: []cluster.ClusterStatus{
			{
				ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "cluster1", KindName: "dev-cluster1", Network: "network-1", Roles: []string{"primary", "config"},
					PrimaryClusterName: "cluster1", ConfigClusterName: "cluster1", IPFamily: "dual",
					PodSubnets: []string{"10.10.0.0/16", "fd00:10:10::/56"}, ServiceSubnets: []string{"10.255.10.0/24", "fd00:10:255:10::/112"},
					ControlPlanes: 1, Workers: 1, Image: "meshctl/node:v1.34.4"}},
				LoadBalancerPools: &model.Pools{DockerNetwork: "kind", CIDRs: []string{"172.18.255.224/28", "fc00:f853:ccd:e793:ffff:ffff:ffff:ffe0/124"}},
				Ready:             true,
				State:             cluster.StateRunning,
				Nodes: []cluster.NodeStatus{
					{Name: "dev-cluster1-control-plane", Role: "control-plane", Ready: true, IPs: []string{"172.18.0.2", "fc00:f853:ccd:e793::2"}, PodCIDRs: []string{"10.10.0.0/24", "fd00:10:10::/64"}, Version: "v1.34.4"},
					{Name: "dev-cluster1-worker", Role: "worker", Ready: true, IPs: []string{"172.18.0.3", "fc00:f853:ccd:e793::3"}, PodCIDRs: []string{"10.10.1.0/24", "fd00:10:10:1::/64"}, Version: "v1.34.4"},
				},
			},
			{
				ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "cluster2", KindName: "dev-cluster2", Network: "network-2", Roles: []string{"primary", "config"},
					PrimaryClusterName: "cluster2", ConfigClusterName: "cluster2", IPFamily: "ipv4",
					PodSubnets: []string{"10.20.0.0/16"}, ServiceSubnets: []string{"10.255.20.0/24"}, ControlPlanes: 1, Image: "meshctl/node:v1.34.4"}},
				LoadBalancerPools: &model.Pools{DockerNetwork: "kind", CIDRs: []string{"172.18.255.208/28"}},
				Nodes:             []cluster.NodeStatus{},
				State:             cluster.StateNotReady,
				Problems:          []string{"API server unreachable: Get \"https://127.0.0.1:40002/api/v1/nodes\": connection refused"},
				Error:             "Get \"https://127.0.0.1:40002/api/v1/nodes\": connection refused",
			},
			{
				ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "cluster3", Network: "network-3", Roles: []string{"primary", "config"},
					PrimaryClusterName: "cluster3", ConfigClusterName: "cluster3", IPFamily: "ipv4",
					PodSubnets: []string{"10.30.0.0/16"}, ServiceSubnets: []string{"10.96.0.0/16"},
					Existing: true, Kubeconfig: "/home/dev/.kube/config", Context: "cloud"},
					Discovery: &model.Discovery{Server: "https://203.0.113.10:6443", Version: "v1.33.2", Nodes: 1,
						PodSubnetsFrom: "nodes' podCIDRs", ServiceSubnetsFrom: "ServiceCIDR kubernetes"}},
				Ready: true,
				State: cluster.StateRunning,
				Nodes: []cluster.NodeStatus{{Name: "node-a", Role: "worker", Ready: true, IPs: []string{"10.0.0.4"}, PodCIDRs: []string{"10.30.0.0/24"}, Version: "v1.33.2"}},
			},
		},
	}
}

// `meshctl status` shows each cluster's load-balancer pools where a person
// and a pipeline look: beside its network and subnets, and in -o json/yaml.
func TestStatusGolden(t *testing.T) {
	t.Parallel()
	res := statusFixture()
	for _, tt := range []struct{ golden, format string }{
		{"status-multi-network.txt", outputText},
		{"status-multi-network.json", outputJSON},
		{"status-multi-network.yaml", outputYAML},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := print(&out, tt.format, res, func(w io.Writer) error { return printStatus(w, res) }); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tt.golden, out.String())
		})
	}
}

// `status --check` is for scripts: exit 1 naming every problem when the
// environment is not Ready, nothing otherwise.
func TestStatusCheck(t *testing.T) {
	t.Parallel()
	res := statusFixture()
	if err := statusCheck(res, false); err != nil {
		t.Errorf("without --check: %v", err)
	}
	err := statusCheck(res, true)
	if err == nil || !strings.Contains(err.Error(), `environment "dev" is Degraded`) || !strings.Contains(err.Error(), `cluster "cluster2": API server unreachable`) {
		t.Errorf("--check on a degraded environment: %v", err)
	}
	res.Ready, res.State, res.Problems = true, cluster.EnvReady, nil
	if err := statusCheck(res, true); err != nil {
		t.Errorf("--check on a ready environment: %v", err)
	}
}

// A stale remote secret reads as any other problem: the cluster's state
// and its problem line in the text, and `status --check` names it with its
// cluster.
func TestStatusStaleRemoteSecret(t *testing.T) {
	t.Parallel()
	res := statusFixture()
	const problem = "remote secret istio-system/istio-remote-secret-cluster1 is stale: it names cluster cluster1's API server https://[fc00::3]:6443, now https://[fc00::5]:6443; `meshctl up` (or `meshctl connect`) rewrites it"
	res.AddProblems("cluster3", cluster.StateRemoteSecretsStale, problem)
	var out bytes.Buffer
	if err := printStatus(&out, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cluster3 (") || !strings.Contains(out.String(), ": REMOTE SECRETS STALE\n") || !strings.Contains(out.String(), "  problem: "+problem+"\n") {
		t.Errorf("text:\n%s", out.String())
	}
	err := statusCheck(res, true)
	if err == nil || !strings.Contains(err.Error(), `cluster "cluster3": `+problem) {
		t.Errorf("--check: %v", err)
	}
}
