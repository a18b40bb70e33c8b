package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster/internal/existing"
	"github.com/meshctl/meshctl/pkg/cluster/internal/records"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// CheckExisting checks every existing cluster of plan — kubeconfig readable,
// context present, API server reachable, credentials accepted and allowed
// what meshctl does, Kubernetes recent enough, not claimed by another
// environment — completes their plans with the subnets their API servers
// report, and returns what it found of each, in plan order. Every failing
// cluster is reported, one message each, and nothing has been changed
// anywhere. Up calls it before any change; it is exported so that a
// command or a test framework can check a topology without bringing it up.
func (p *Provider) CheckExisting(ctx context.Context, plan *model.Plan) ([]model.ClusterState, error) {
	var idx []int
	for i, c := range plan.Clusters {
		if c.Existing {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil, nil
	}
	found := make([]model.ClusterState, len(idx))
	err := parallel.ForEach(indexes(len(idx)), func(k int) error {
		c, err := existing.Check(ctx, plan.Env, plan.Clusters[idx[k]])
		if err != nil {
			return fmt.Errorf("  cluster %q: %w", plan.Clusters[idx[k]].Name, err)
		}
		found[k] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("existing clusters failed their checks (nothing was changed):\n%w", err)
	}
	for k, i := range idx {
		plan.Clusters[i] = found[k].ClusterPlan
		if existing.Loopback(found[k].Discovery.Server) {
			// Fine for meshctl on this host; not for another
			// cluster's control plane given its kubeconfig.
			p.logger.Warnf("cluster %q: its API server %s is a loopback address: other clusters cannot reach it (remote secrets will not work)", found[k].Name, found[k].Discovery.Server)
		}
	}
	// Discovered subnets may clash with others on the same network.
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	return found, nil
}

// existingRecordPath is the local record of an existing cluster.
func (p *Provider) existingRecordPath(env, cluster string) string {
	return filepath.Join(p.clusterDir(env, cluster), records.ExistingFile)
}

// recordExisting writes the claim into an existing cluster (creating the
// meshctl-system namespace, labelled as meshctl's, if missing) and the
// local record that lets status, list and down find it.
func (p *Provider) recordExisting(ctx context.Context, rec model.Record) error {
	c := rec.Cluster
	cs, _, err := existing.Client(c.ClusterPlan)
	if err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	if err := existing.Claim(ctx, cs, rec); err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	if err := records.WriteExisting(p.existingRecordPath(rec.Env, c.Name), rec); err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return nil
}

// existingRecords reads the local records of env's existing clusters; env
// "" reads every environment's.
func (p *Provider) existingRecords(env string) ([]model.Record, error) {
	if env == "" {
		env = "*"
	}
	files, err := filepath.Glob(filepath.Join(p.artifacts, env, "*", records.ExistingFile))
	if err != nil {
		return nil, fmt.Errorf("finding existing-cluster records: %w", err)
	}
	return records.ReadExisting(files)
}

// forgetExisting removes meshctl's local files for an existing cluster.
func (p *Provider) forgetExisting(env string, c model.ClusterPlan) error {
	for _, f := range []string{p.existingRecordPath(env, c.Name), p.KubeconfigPath(env, c.Name, false), p.KubeconfigPath(env, c.Name, true)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cluster %q: removing %s: %w", c.Name, f, err)
		}
	}
	_ = os.Remove(p.clusterDir(env, c.Name))
	return nil
}
