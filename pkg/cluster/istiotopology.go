package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshctl/meshctl/internal/fsutil"
)

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

// TopologyPath is where Up writes an environment's topology file.
func (p *Provider) TopologyPath(env string, internal bool) string {
	name := TopologyFile
	if internal {
		name = InternalTopologyFile
	}
	return filepath.Join(p.artifacts, env, name)
}

// IstioTopology is the topology of clusters cs of env in Istio's format,
// meta.kubeconfig the absolute path of each cluster's kubeconfig as Up
// exports it (the internal one with internal). Primary and config cluster
// names are written when a cluster is not its own primary and config, as
// Istio's own files write them.
func (p *Provider) IstioTopology(env string, cs []ClusterPlan, internal bool) ([]IstioCluster, error) {
	out := make([]IstioCluster, 0, len(cs))
	for _, c := range cs {
		kc, err := filepath.Abs(p.KubeconfigPath(env, c.Name, internal))
		if err != nil {
			return nil, fmt.Errorf("cluster %q: kubeconfig path: %w", c.Name, err)
		}
		e := IstioCluster{
			Kind: "Kubernetes", ClusterName: c.Name, Network: c.Network,
			PodSubnet: strings.Join(c.PodSubnets, ","), SvcSubnet: strings.Join(c.ServiceSubnets, ","),
			Meta: IstioMeta{Kubeconfig: kc},
		}
		if c.PrimaryClusterName != c.Name || c.ConfigClusterName != c.Name {
			e.PrimaryClusterName, e.ConfigClusterName = c.PrimaryClusterName, c.ConfigClusterName
		}
		out = append(out, e)
	}
	return out, nil
}

// writeTopology writes both topology files of the plan. They hold paths,
// not credentials: the kubeconfigs they name are owner-only.
func (p *Provider) writeTopology(plan *Plan) error {
	for _, internal := range []bool{false, true} {
		t, err := p.IstioTopology(plan.Env, plan.Clusters, internal)
		if err != nil {
			return err
		}
		data, err := json.MarshalIndent(t, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding topology: %w", err)
		}
		path := p.TopologyPath(plan.Env, internal)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
		}
		if err := fsutil.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing topology: %w", err)
		}
	}
	return nil
}

// removeTopology removes the topology files of env.
func (p *Provider) removeTopology(env string) error {
	for _, internal := range []bool{false, true} {
		if err := os.Remove(p.TopologyPath(env, internal)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing topology file: %w", err)
		}
	}
	return nil
}
