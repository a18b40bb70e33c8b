package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster/internal/existing"
	"github.com/meshctl/meshctl/pkg/cluster/internal/kindprovider"
	"github.com/meshctl/meshctl/pkg/cluster/internal/records"
	"github.com/meshctl/meshctl/pkg/cluster/internal/uninstall"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// Listed is one cluster List found: a kind cluster on this machine (with
// meshctl's record of it, when it has one), or an existing (non-kind)
// cluster an environment uses, found through its local record: then
// KindName is empty and Record.Cluster.Existing is set. "Existing" is kept
// for the second meaning alone: a cluster meshctl uses and did not create.
type Listed struct {
	KindName string `json:"kindName"`
	// Record is meshctl's record of it; nil for clusters meshctl did not
	// create (or did not finish creating).
	Record *model.Record `json:"record,omitempty"`
	// Error is why the record could not be read.
	Error string `json:"error,omitempty"`
	// State is StateStopped (its control-plane container does not run:
	// the record was read from the stopped container), StateMissing (only
	// meshctl's local record is left: no kind cluster has the name) or
	// StateIncomplete (see Incomplete); empty otherwise.
	State string `json:"state,omitempty"`
	// Incomplete is the plan of a kind cluster whose creation meshctl
	// began and never finished (the run was killed): it has no record on
	// its node, only meshctl's local one.
	Incomplete *model.Record `json:"incomplete,omitempty"`
}

// Env is the environment the cluster belongs to, or "" if none.
func (e Listed) Env() string {
	if e.Record == nil {
		return ""
	}
	return e.Record.Env
}

// List returns every kind cluster on this machine with meshctl's record of
// it, sorted by environment and name.
func (p *Provider) List(ctx context.Context) ([]Listed, error) {
	if freshReads(ctx) {
		p.snap.forget()
	}
	recs, err := p.existingRecords("")
	if err != nil {
		return nil, err
	}
	names, err := p.kind.List()
	kindOK := err == nil
	if err != nil {
		// Say what is wrong the way up does: kind's own error is only
		// "exit status 1".
		if derr := p.checkDocker(ctx); derr != nil {
			err = derr
		} else {
			err = fmt.Errorf("listing kind clusters: %w", err)
		}
		// A machine that runs meshctl only against existing clusters (a
		// CI job on real clusters) may have no Docker at all.
		if len(recs) == 0 {
			return nil, err
		}
		p.noKindWarning.Do(func() {
			p.logger.Warnf("cannot list kind clusters (%v): showing existing clusters only", err)
		})
		names = nil
	}
	out := make([]Listed, len(names))
	for i, n := range names {
		out[i] = Listed{KindName: n}
	}
	local := map[string]records.Local{}
	if kindOK {
		for _, r := range p.localRecords() {
			local[r.Cluster.KindName] = r
		}
	}
	// A record that cannot be read is reported on its cluster, not as an
	// error of the listing: the fan-out's error is always nil here.
	_ = parallel.ForEach(indexes(len(out)), func(i int) error {
		out[i].read(ctx, p, local)
		return nil
	})
	for _, e := range out {
		delete(local, e.KindName)
	}
	// What meshctl recorded locally and kind no longer has: deleted
	// behind meshctl's back, or killed before kind made a container.
	for _, r := range local {
		out = append(out, Listed{KindName: r.Cluster.KindName, Record: &r.Record, State: StateMissing})
	}
	for _, r := range recs {
		out = append(out, Listed{Record: &r})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Env() != out[j].Env() {
			return out[i].Env() < out[j].Env()
		}
		return out[i].sortName() < out[j].sortName()
	})
	return out, nil
}

// read fills in meshctl's record of a kind cluster: from its control-plane
// node, from the stopped container when it does not run, or — for a cluster
// whose creation never finished — from meshctl's local record.
func (e *Listed) read(ctx context.Context, p *Provider, local map[string]records.Local) {
	rec, err := p.readRecord(e.KindName)
	if err != nil && !errors.Is(err, records.ErrNone) {
		if stopped, serr := p.stoppedNodes(ctx, e.KindName); serr == nil && len(stopped) > 0 {
			rec, err = p.readStoppedRecord(ctx, e.KindName)
			if err == nil {
				e.State = StateStopped
			}
		}
	}
	switch {
	case errors.Is(err, records.ErrNone):
		if l, ok := local[e.KindName]; ok && l.InProgress {
			r := l.Record
			e.Incomplete, e.State = &r, StateIncomplete
		}
	case err != nil:
		e.Error = err.Error()
	default:
		e.Record = rec
	}
}

func (e Listed) sortName() string {
	if e.KindName == "" && e.Record != nil {
		return e.Record.Cluster.Name
	}
	return e.KindName
}

// Environment returns the clusters of env as meshctl recorded them, in
// mesh-name order.
func (p *Provider) Environment(ctx context.Context, env string) ([]model.ClusterState, error) {
	recs, err := p.records(ctx, env)
	if err != nil {
		return nil, err
	}
	out := make([]model.ClusterState, len(recs))
	for i, r := range recs {
		out[i] = r.Cluster
	}
	return out, nil
}

// records returns meshctl's records of the clusters of env, in mesh-name
// order: Environment's clusters, with the load-balancer pools meshctl gave
// each.
func (p *Provider) records(ctx context.Context, env string) ([]model.Record, error) {
	all, err := p.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []model.Record
	for _, e := range all {
		if e.Env() == env {
			out = append(out, *e.Record)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster.Name < out[j].Cluster.Name })
	return out, nil
}

// Find returns the cluster of env with the given mesh or kind name.
func (p *Provider) Find(ctx context.Context, env, name string) (model.ClusterState, error) {
	cs, err := p.Environment(ctx, env)
	if err != nil {
		return model.ClusterState{}, err
	}
	var names []string
	for _, c := range cs {
		if c.Name == name || c.KindName == name {
			return c, nil
		}
		names = append(names, c.Name)
	}
	if len(names) == 0 {
		return model.ClusterState{}, fmt.Errorf("environment %q has no clusters (create it with `meshctl up`)", env)
	}
	return model.ClusterState{}, fmt.Errorf("no cluster %q in environment %q (it has %s)", name, env, strings.Join(names, ", "))
}

// Kubeconfig returns a cluster's kubeconfig, read from the cluster itself.
func (p *Provider) Kubeconfig(ctx context.Context, env, name string, internal bool) ([]byte, error) {
	c, err := p.Find(ctx, env, name)
	if err != nil {
		return nil, err
	}
	return p.kubeconfig(c.ClusterPlan, internal)
}

// ClusterKubeconfig is Kubeconfig for a cluster of Environment, located by
// its plan (kind name, or kubeconfig and context): finding a cluster by
// name lists every cluster on the machine and reads each one's record, so
// a step that needs every cluster's kubeconfig would do that once per
// cluster.
func (p *Provider) ClusterKubeconfig(_ context.Context, c model.ClusterPlan, internal bool) ([]byte, error) {
	return p.kubeconfig(c, internal)
}

// DownResult reports what `down` deleted.
type DownResult struct {
	Env     string   `json:"env"`
	Deleted []string `json:"deleted"`
	// Uninstalled lists, per cluster kept (existing clusters, and kind
	// clusters with DownWithUninstallOnly), what meshctl removed from it.
	Uninstalled []Uninstalled `json:"uninstalled,omitempty"`
	Registry    string        `json:"registry,omitempty"`
	Network     string        `json:"network,omitempty"`
}

// Uninstalled is what down removed from a cluster it kept.
type Uninstalled struct {
	Cluster string `json:"cluster"`
	// Existing is set for an existing cluster, which down never deletes.
	Existing bool     `json:"existing,omitempty"`
	Objects  []string `json:"objects"`
}

type downOptions struct {
	registry      string
	extra         []string
	uninstallOnly bool
}

// DownWithUninstallOnly keeps the kind clusters too: down then removes only
// what meshctl installed in them (objects labelled
// app.kubernetes.io/managed-by=meshctl), as it always does for existing
// clusters.
func DownWithUninstallOnly(b bool) DownOption { return func(o *downOptions) { o.uninstallOnly = b } }

// DownOption configures Down.
type DownOption func(*downOptions)

// DownWithRegistry also deletes the named registry container.
func DownWithRegistry(name string) DownOption { return func(o *downOptions) { o.registry = name } }

// DownWithClusters also deletes these kind clusters, meshctl's or not — for
// clusters kept with --retain before meshctl could record them.
func DownWithClusters(kindNames ...string) DownOption {
	return func(o *downOptions) { o.extra = append(o.extra, kindNames...) }
}

// Down deletes every kind cluster of env, concurrently, with its
// kubeconfigs. It is idempotent: deleting what is gone succeeds. When no
// kind cluster is left on the machine, the kind docker network goes too.
//
// Existing clusters are never deleted: down removes from them every object
// meshctl labelled (the cacerts Secret, its claim), then meshctl's local
// record and kubeconfig copies, and reports what it removed.
func (p *Provider) Down(ctx context.Context, env string, opts ...DownOption) (*DownResult, error) {
	var o downOptions
	for _, opt := range opts {
		opt(&o)
	}
	ctx, unlock, err := p.LockEnv(ctx, env, "down")
	if err != nil {
		return nil, err
	}
	defer unlock()
	res := &DownResult{Env: env, Deleted: []string{}}
	all, err := p.List(ctx)
	if err != nil {
		return nil, err
	}
	var targets, existingCs, incomplete []model.ClusterPlan
	extra := map[string]bool{}
	for _, n := range o.extra {
		extra[n] = true
	}
	for _, e := range all {
		switch {
		case e.Env() == env && e.Record.Cluster.Existing:
			existingCs = append(existingCs, e.Record.Cluster.ClusterPlan)
		case e.Env() == env:
			targets = append(targets, e.Record.Cluster.ClusterPlan)
			delete(extra, e.KindName)
		case e.Incomplete != nil && e.Incomplete.Env == env:
			// Its creation was killed: nothing of it is worth keeping,
			// even with --uninstall-only.
			incomplete = append(incomplete, e.Incomplete.Cluster.ClusterPlan)
			delete(extra, e.KindName)
		case e.Error != "" && !extra[e.KindName]:
			p.logger.Warnf("kind cluster %s: cannot read its meshctl record (%s); if it belongs to environment %q, delete it with `meshctl down %s`", e.KindName, e.Error, env, e.KindName)
		case extra[e.KindName]:
			if e.Record != nil && e.Record.Env != env {
				return nil, fmt.Errorf("kind cluster %s belongs to environment %q, not %q", e.KindName, e.Record.Env, env)
			}
			targets = append(targets, model.ClusterPlan{Name: e.KindName, KindName: e.KindName})
			delete(extra, e.KindName)
		}
	}
	keep := existingCs
	if o.uninstallOnly {
		keep, targets = append(targets, existingCs...), nil
	}
	targets = append(targets, incomplete...)
	uninstalled := make([]Uninstalled, len(keep))
	err = errors.Join(
		p.deleteClusters(env, targets),
		parallel.ForEach(indexes(len(keep)), func(i int) error {
			objs, err := p.uninstallFrom(ctx, env, keep[i])
			uninstalled[i] = Uninstalled{Cluster: keep[i].Name, Existing: keep[i].Existing, Objects: objs}
			return err
		}),
	)
	if err != nil {
		return nil, err
	}
	for _, c := range targets {
		res.Deleted = append(res.Deleted, c.KindName)
	}
	res.Uninstalled = uninstalled
	// The topology names clusters that are gone now (or some of them):
	// `meshctl topology` prints the current one.
	if err := p.removeTopology(env); err != nil {
		return res, err
	}
	// The environment's directory goes too when nothing (logs) is left in it.
	_ = os.Remove(filepath.Join(p.artifacts, env))
	if o.registry != "" {
		if _, err := p.docker.Run(ctx, "inspect", "--format", "{{.Id}}", o.registry); err == nil {
			if _, err := p.docker.Run(ctx, "rm", "--force", "--volumes", o.registry); err != nil {
				return res, fmt.Errorf("deleting registry %s: %w", o.registry, err)
			}
			res.Registry = o.registry
		}
	}
	if len(targets) == 0 && len(existingCs) > 0 {
		return res, nil // no kind cluster was touched: leave Docker alone
	}
	left, err := p.kind.List()
	if err != nil {
		return res, fmt.Errorf("listing kind clusters: %w", err)
	}
	if len(left) == 0 {
		deleted, err := p.removeIdleNetwork(ctx, KindNetwork())
		if err != nil {
			return res, err
		}
		if deleted {
			res.Network = KindNetwork()
		}
	}
	return res, nil
}

// uninstallFrom removes meshctl's objects from a cluster it keeps; for an
// existing cluster, meshctl's local files for it go too, since the
// environment no longer uses it. A cluster another environment has claimed
// since is left alone.
func (p *Provider) uninstallFrom(ctx context.Context, env string, c model.ClusterPlan) ([]string, error) {
	kc, err := p.kubeconfig(c, false)
	if err != nil {
		return nil, fmt.Errorf("uninstalling from cluster %q: %w", c.Name, err)
	}
	// The command's rate limit: uninstall.Labelled lists every resource
	// type the API server serves, one request each (≈ 90 on a kind cluster
	// with the dataplane), which client-go's default 5 QPS past a burst of
	// 10 spread over 16-18 s.
	kg := kubeclient.FromBytes(kc, "", kubeclient.WithTimeout(existing.Timeout), kubeclient.WithCommandRateLimit())
	rc, err := kg.RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("uninstalling from cluster %q: %w", c.Name, err)
	}
	cs, err := kg.Kubernetes()
	if err != nil {
		return nil, fmt.Errorf("uninstalling from cluster %q: %w", c.Name, err)
	}
	if err := existing.CheckClaim(ctx, cs, env, c.Name); err != nil {
		return nil, fmt.Errorf("not uninstalling from cluster %q: it %w", c.Name, err)
	}
	objs, err := uninstall.Labelled(ctx, rc)
	if err != nil {
		return objs, fmt.Errorf("uninstalling from cluster %q (%s): %w (rerun `meshctl down` when it answers)", c.Name, rc.Host, err)
	}
	if objs == nil {
		objs = []string{}
	}
	if c.Existing {
		if err := p.forgetExisting(env, c); err != nil {
			return objs, err
		}
	}
	p.logger.V(1).Infof("cluster %q: uninstalled %d objects", c.Name, len(objs))
	return objs, nil
}

// deleteClusters deletes clusters concurrently and removes their kubeconfigs.
func (p *Provider) deleteClusters(env string, cs []model.ClusterPlan) error {
	return parallel.ForEach(cs, func(c model.ClusterPlan) error {
		kc := p.KubeconfigPath(env, c.Name, false)
		if err := p.kind.Delete(c.KindName, kc); err != nil {
			return fmt.Errorf("deleting cluster %q (kind cluster %s): %w", c.Name, c.KindName, err)
		}
		for _, f := range []string{kc, kc + ".lock", p.KubeconfigPath(env, c.Name, true), p.localRecordPath(env, c.Name)} {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("cluster %q: removing %s: %w", c.Name, f, err)
			}
		}
		// The cluster's directory goes if nothing else (logs) is in it.
		_ = os.Remove(p.clusterDir(env, c.Name))
		p.logger.V(1).Infof("deleted cluster %q (kind cluster %s)", c.Name, c.KindName)
		return nil
	})
}

// removeIdleNetwork deletes a docker network that no container uses.
func (p *Provider) removeIdleNetwork(ctx context.Context, name string) (bool, error) {
	ps, err := p.networkSubnets(ctx, name)
	if err != nil {
		return false, err
	}
	if ps == nil {
		return false, nil // gone already
	}
	release, ok, err := claimNetwork(p.locksDir())
	if err != nil {
		return false, err
	}
	if !ok {
		return false, nil // another environment's up is creating on it
	}
	defer release()
	out, err := p.docker.Run(ctx, "network", "inspect", name, "--format", "{{len .Containers}}")
	if err != nil {
		return false, fmt.Errorf("inspecting docker network %q: %w", name, err)
	}
	if strings.TrimSpace(string(out)) != "0" {
		return false, nil // the registry, or someone else's container, still uses it
	}
	if _, err := p.docker.Run(ctx, "network", "rm", name); err != nil {
		return false, fmt.Errorf("removing docker network %q: %w", name, err)
	}
	return true, nil
}

// Exec runs argv on a node of a kind cluster, with stdin: how other packages
// (routes, for one) change nodes without knowing kind.
func (p *Provider) Exec(ctx context.Context, kindName, node string, stdin []byte, argv ...string) error {
	ns, err := p.kind.ListNodes(kindName)
	if err != nil {
		return fmt.Errorf("listing nodes of %s: %w", kindName, err)
	}
	for _, n := range ns {
		if n.String() != node {
			continue
		}
		cmd := n.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.SetStdin(bytes.NewReader(stdin))
		if err := cmd.Run(); err != nil {
			return kindprovider.RunErr(err)
		}
		return nil
	}
	return fmt.Errorf("kind cluster %s has no node %s", kindName, node)
}
