package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshctl/meshctl/internal/fsutil"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// TopologyPath is where Up writes an environment's topology file.
func (p *Provider) TopologyPath(env string, internal bool) string {
	name := model.TopologyFile
	if internal {
		name = model.InternalTopologyFile
	}
	return filepath.Join(p.artifacts, env, name)
}

// IstioTopology is the topology of clusters cs of env in Istio's format,
// meta.kubeconfig the absolute path of each cluster's kubeconfig as Up
// exports it (the internal one with internal). Primary and config cluster
// names are written when a cluster is not its own primary and config, as
// Istio's own files write them.
func (p *Provider) IstioTopology(env string, cs []model.ClusterPlan, internal bool) ([]model.IstioCluster, error) {
	out := make([]model.IstioCluster, 0, len(cs))
	for _, c := range cs {
		kc, err := filepath.Abs(p.KubeconfigPath(env, c.Name, internal))
		if err != nil {
			return nil, fmt.Errorf("cluster %q: kubeconfig path: %w", c.Name, err)
		}
		e := model.IstioCluster{
			Kind: "Kubernetes", ClusterName: c.Name, Network: c.Network,
			PodSubnet: strings.Join(c.PodSubnets, ","), SvcSubnet: strings.Join(c.ServiceSubnets, ","),
			Meta: model.IstioMeta{Kubeconfig: kc},
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
func (p *Provider) writeTopology(plan *model.Plan) error {
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
