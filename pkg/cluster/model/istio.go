package model

// The topology files Up writes into <artifacts>/<env>/ for Istio's test
// framework (its --istio.test.kube.topology flag, which integ-suite-kind.sh
// passes as INTEGRATION_TEST_TOPOLOGY_FILE). The framework reads one
// kubeconfig per cluster, meta.kubeconfig, so the two ways to reach the API
// servers are two files: TopologyFile with the host kubeconfigs, for a test
// run on this machine; InternalTopologyFile with the kubeconfigs whose
// servers are the control-plane containers' addresses on the kind network,
// for a test run in a container on that network (as Istio's CI runs) with
// the artifacts directory mounted at the same path.
const (
	TopologyFile         = "topology.json"
	InternalTopologyFile = "topology-internal.json"
)

// IstioCluster is one entry of Istio's topology file: the keys Istio's
// kind_provisioner.sh reads to create clusters and its test framework
// (pkg/test/framework/components/cluster.Config) reads to use them.
type IstioCluster struct {
	Kind               string    `json:"kind"`
	ClusterName        string    `json:"clusterName"`
	PodSubnet          string    `json:"podSubnet,omitempty"`
	SvcSubnet          string    `json:"svcSubnet,omitempty"`
	Network            string    `json:"network"`
	PrimaryClusterName string    `json:"primaryClusterName,omitempty"`
	ConfigClusterName  string    `json:"configClusterName,omitempty"`
	Meta               IstioMeta `json:"meta"`
}

// IstioMeta is an entry's meta: where the framework finds the kubeconfig.
type IstioMeta struct {
	Kubeconfig string `json:"kubeconfig"`
}
