package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster/internal/records"
	"github.com/meshctl/meshctl/pkg/cluster/internal/registry"
	"github.com/meshctl/meshctl/pkg/cluster/model"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/pkg/version"
)

// What up did with each cluster.
const (
	ActionCreated   = "created"
	ActionReused    = "reused"
	ActionRecreated = "recreated"
	// ActionExisting: an existing cluster, checked and used as it is.
	ActionExisting = "existing"
	// ActionHealed: a cluster of the plan that was not running as planned
	// (stopped containers, an API server or nodes not ready, stale routes),
	// brought back; ClusterResult.Healed says what was wrong.
	ActionHealed = "healed"
)

// UpResult reports what `up` did.
type UpResult struct {
	Env      string          `json:"env"`
	Clusters []ClusterResult `json:"clusters"`
	Registry *RegistryResult `json:"registry,omitempty"`
}

// ClusterResult is one cluster's outcome.
type ClusterResult struct {
	Name               string `json:"name"`
	KindName           string `json:"kindName"`
	Network            string `json:"network"`
	Action             string `json:"action"`
	Kubeconfig         string `json:"kubeconfig"`
	InternalKubeconfig string `json:"internalKubeconfig"`
	// Healed lists what was wrong with a healed cluster (or a recreated
	// one whose creation had never finished). Stale routes are re-asserted
	// by the connect step that follows.
	Healed []string `json:"healed,omitempty"`
}

// RegistryResult is the local registry's outcome.
type RegistryResult struct {
	Name   string `json:"name"`
	Host   string `json:"host"`
	Action string `json:"action"`
}

// DefaultWait is how long Up waits for each control plane to be Ready.
const DefaultWait = 5 * time.Minute

type upOptions struct {
	retain   bool
	recreate bool
	wait     time.Duration
}

// UpOption configures Up.
type UpOption func(*upOptions)

// UpWithRetain keeps clusters whose creation failed, for debugging.
func UpWithRetain(b bool) UpOption { return func(o *upOptions) { o.retain = b } }

// UpWithRecreate deletes and recreates the kind clusters already there that
// differ from the plan.
func UpWithRecreate(b bool) UpOption { return func(o *upOptions) { o.recreate = b } }

// UpWithWait waits up to d for each cluster's control plane to be Ready.
func UpWithWait(d time.Duration) UpOption { return func(o *upOptions) { o.wait = d } }

// Up makes the environment of plan exist: the story of `meshctl up`.
// Clusters that already exist as planned are reused; missing ones are created
// in parallel. If anything fails, or ctx is cancelled (Ctrl-C), every cluster
// this call created is deleted — after its logs are exported to the artifacts
// directory — unless retained.
func (p *Provider) Up(ctx context.Context, plan *model.Plan, opts ...UpOption) (*UpResult, error) {
	o := upOptions{wait: DefaultWait}
	for _, opt := range opts {
		opt(&o)
	}
	kind := false
	for _, c := range plan.Clusters {
		kind = kind || !c.Existing
	}
	ctx, unlock, err := p.lockEnv(ctx, plan.Env, "up", kind)
	if err != nil {
		return nil, err
	}
	defer unlock()
	status := cli.NewStatus(p.logger)

	kinds, existingCs := splitExisting(plan.Clusters)
	if len(kinds) > 0 {
		status.Start("Checking Docker")
		if err := p.Preflight(ctx, plan); err != nil {
			status.End(false)
			return nil, err
		}
	}
	discovered := map[string]*model.Discovery{}
	if len(existingCs) > 0 {
		status.Start("Checking existing clusters: " + meshNames(existingCs))
		found, err := p.CheckExisting(ctx, plan)
		if err != nil {
			status.End(false)
			return nil, err
		}
		for _, c := range found {
			discovered[c.Name] = c.Discovery
		}
	}

	if len(kinds) > 0 {
		status.Start("Inspecting the kind clusters already there")
	}
	actions, healed, err := p.classify(ctx, plan, o.recreate)
	if err != nil {
		status.End(false)
		return nil, err
	}

	res := &UpResult{Env: plan.Env}
	// Only kind nodes pull from the local registry.
	if plan.Registry.Enabled && len(kinds) > 0 {
		status.Start(fmt.Sprintf("Starting registry %s on localhost:%d", plan.Registry.Name, plan.Registry.Port))
		act, err := registry.Ensure(ctx, p.docker, plan.Registry)
		if err != nil {
			status.End(false)
			return nil, err
		}
		res.Registry = &RegistryResult{Name: plan.Registry.Name, Host: fmt.Sprintf("localhost:%d", plan.Registry.Port), Action: act}
	}

	var recreate, create []model.ClusterPlan
	for _, c := range plan.Clusters {
		switch actions[c.Name] {
		case ActionRecreated:
			recreate = append(recreate, c)
			create = append(create, c)
		case ActionCreated:
			create = append(create, c)
		}
	}
	if len(recreate) > 0 {
		status.Start("Deleting clusters to recreate: " + kindNames(recreate))
		if err := p.deleteClusters(plan.Env, recreate); err != nil {
			status.End(false)
			return nil, err
		}
	}
	if len(create) > 0 {
		title := "Creating " + kindNames(create)
		if len(create) > 1 {
			title += " in parallel"
		}
		status.Start(title)
		if err := p.createAll(ctx, plan, create, o); err != nil {
			status.End(false)
			return nil, err
		}
	}

	var heal []model.ClusterPlan
	for _, c := range plan.Clusters {
		if actions[c.Name] == ActionReused || actions[c.Name] == ActionHealed {
			heal = append(heal, c)
		}
	}
	if len(heal) > 0 {
		status.Start("Checking that reused clusters run: " + kindNames(heal))
		var mu sync.Mutex
		err := parallel.ForEach(heal, func(c model.ClusterPlan) error {
			found, err := p.heal(ctx, c, o.wait)
			mu.Lock()
			defer mu.Unlock()
			if len(found) > 0 {
				actions[c.Name] = ActionHealed
				healed[c.Name] = append(healed[c.Name], found...)
			}
			return err
		})
		if err != nil {
			status.End(false)
			return nil, err
		}
		for _, c := range heal {
			if actions[c.Name] == ActionHealed {
				p.logger.V(0).Infof(" • %s: healed (%s)", c.Name, strings.Join(healed[c.Name], "; "))
			}
		}
	}

	status.Start("Writing kubeconfigs and registry settings")
	err = parallel.ForEach(plan.Clusters, func(c model.ClusterPlan) error {
		if c.Existing {
			return p.adoptExisting(ctx, plan, model.ClusterState{ClusterPlan: c, Discovery: discovered[c.Name]})
		}
		if err := p.exportKubeconfigs(plan, c); err != nil {
			return err
		}
		// Clusters made by a meshctl that kept no local record get one:
		// status can then tell when one goes missing.
		if _, err := os.Stat(p.localRecordPath(plan.Env, c.Name)); errors.Is(err, os.ErrNotExist) {
			if err := p.writeLocalRecord(model.Record{Env: plan.Env, Cluster: model.ClusterState{ClusterPlan: c}, Version: version.String(), CreatedAt: p.now().UTC()}, false); err != nil {
				return err
			}
		}
		if plan.Registry.Enabled && actions[c.Name] != ActionReused && actions[c.Name] != ActionHealed {
			return registry.Configure(ctx, p.docker, KindNetwork(), plan.Registry, c, p.kind.ListNodes)
		}
		return nil
	})
	if err != nil {
		status.End(false)
		p.rollback(plan, create, o.retain)
		return nil, err
	}
	if err := p.writeTopology(plan); err != nil {
		status.End(false)
		return nil, err
	}
	status.End(true)

	for _, c := range plan.Clusters {
		res.Clusters = append(res.Clusters, ClusterResult{
			Name: c.Name, KindName: c.KindName, Network: c.Network, Action: actions[c.Name], Healed: healed[c.Name],
			Kubeconfig:         p.KubeconfigPath(plan.Env, c.Name, false),
			InternalKubeconfig: p.KubeconfigPath(plan.Env, c.Name, true),
		})
	}
	return res, nil
}

// classify decides, for each planned cluster, whether to create, reuse or
// recreate it. It fails — before anything is changed — when a kind cluster
// of the same name is already there and differs from the plan (and recreate
// is off), or belongs to someone else.
func (p *Provider) classify(ctx context.Context, plan *model.Plan, recreate bool) (actions map[string]string, healed map[string][]string, err error) {
	var present []string // kind clusters on this machine
	if kinds, _ := splitExisting(plan.Clusters); len(kinds) > 0 {
		if present, err = p.kind.List(); err != nil {
			return nil, nil, fmt.Errorf("listing kind clusters: %w", err)
		}
	}
	exists := map[string]bool{}
	for _, n := range present {
		exists[n] = true
	}
	local := map[string]records.Local{}
	for _, r := range p.localRecords() {
		local[r.Cluster.KindName] = r
	}
	actions, healed = map[string]string{}, map[string][]string{}
	var conflicts []string
	var mu sync.Mutex
	err = parallel.ForEach(plan.Clusters, func(c model.ClusterPlan) error {
		act, why, conflict, err := p.classifyOne(ctx, plan, c, exists[c.KindName], recreate, local)
		mu.Lock()
		defer mu.Unlock()
		actions[c.Name] = act
		if why != "" {
			healed[c.Name] = []string{why}
		}
		if conflict != "" {
			conflicts = append(conflicts, conflict)
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if len(conflicts) > 0 {
		sort.Strings(conflicts)
		return nil, nil, fmt.Errorf("kind clusters already there differ from the plan (nothing was changed; rerun with --recreate to replace them, or `meshctl down` first):\n%s", strings.Join(conflicts, "\n"))
	}
	return actions, healed, nil
}

// classifyOne decides one cluster's action; why says what up heals.
func (p *Provider) classifyOne(ctx context.Context, plan *model.Plan, c model.ClusterPlan, exists, recreate bool, local map[string]records.Local) (action, why, conflict string, err error) {
	if c.Existing {
		return ActionExisting, "", "", nil // checked by CheckExisting
	}
	if !exists {
		return ActionCreated, "", "", nil
	}
	e := Listed{KindName: c.KindName}
	e.read(ctx, p, local)
	switch {
	case e.Incomplete != nil && e.Incomplete.Env == plan.Env && e.Incomplete.Cluster.Name == c.Name:
		// meshctl began creating it for this environment and was
		// killed: nothing in it is worth keeping.
		return ActionRecreated, "its creation never finished", "", nil
	case e.Error != "":
		return "", "", "", fmt.Errorf("cluster %q: %s", c.Name, e.Error)
	case e.Record == nil:
		if recreate {
			return ActionRecreated, "", "", nil
		}
		return "", "", fmt.Sprintf("  cluster %q: kind cluster %q exists but was not created by meshctl (or its creation did not finish)", c.Name, c.KindName), nil
	case e.Record.Env != plan.Env:
		// Never recreate another environment's cluster, even when asked to.
		return "", "", fmt.Sprintf("  cluster %q: kind cluster %q belongs to environment %q; choose another --env or --name-prefix", c.Name, c.KindName, e.Record.Env), nil
	}
	diff := model.Diff(e.Record.Cluster.ClusterPlan, c)
	switch {
	case len(diff) == 0 && e.State == StateStopped:
		return ActionHealed, "", "", nil // heal says which nodes it starts
	case len(diff) == 0:
		return ActionReused, "", "", nil
	case recreate:
		return ActionRecreated, "", "", nil
	}
	return "", "", fmt.Sprintf("  cluster %q:\n    %s", c.Name, strings.Join(diff, "\n    ")), nil
}

// heal brings a reused cluster back to running: it starts stopped node
// containers and waits for the API server and every node to be Ready. It
// returns what it found wrong, stale routes included (the connect step
// re-asserts them).
func (p *Provider) heal(ctx context.Context, c model.ClusterPlan, wait time.Duration) ([]string, error) {
	var found []string
	cs, err := p.nodeContainers(ctx, c.KindName)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	stopped := stoppedOf(cs)
	if len(stopped) > 0 {
		found = append(found, "started "+strings.Join(stopped, ", "))
		if err := p.startNodes(ctx, stopped); err != nil {
			return found, fmt.Errorf("cluster %q: %w", c.Name, err)
		}
		// Their start times are new: the pods to wait for are those the
		// kubelets report since.
		if cs, err = p.nodeContainers(ctx, c.KindName); err != nil {
			return found, fmt.Errorf("cluster %q: %w", c.Name, err)
		}
	}
	started := startsOf(cs)
	if st := p.readAPI(ctx, c, started); !st.Ready {
		why := st.Error
		if why == "" {
			why = notReadyWhy(st)
		}
		if len(stopped) == 0 {
			found = append(found, "was not ready: "+why)
		}
		if err := p.waitReady(ctx, c, wait, min(p.poll, createPoll), started); err != nil {
			return found, err
		}
	}
	if probs := p.routeProblems(ctx, c.KindName); len(probs) > 0 {
		found = append(found, "routes stale: "+strings.Join(probs, "; "))
	}
	return found, nil
}

// createAll creates clusters in parallel. kind's Create cannot be cancelled,
// so on Ctrl-C the clusters are deleted under it, which makes it return.
func (p *Provider) createAll(ctx context.Context, plan *model.Plan, create []model.ClusterPlan, o upOptions) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("creating clusters: %w", context.Cause(ctx))
	}
	// Only what this process created is rolled back: a kind cluster of
	// the same name that someone else created after classify (kind refuses
	// to create over it) is theirs.
	var mu sync.Mutex
	foreign := map[string]bool{}
	ours := func() []model.ClusterPlan {
		mu.Lock()
		defer mu.Unlock()
		var out []model.ClusterPlan
		for _, c := range create {
			if !foreign[c.KindName] {
				out = append(out, c)
			}
		}
		return out
	}
	// Held until every container is made (see networkGuard).
	unguard, gerr := holdNetwork(p.locksDir())
	if gerr != nil {
		return fmt.Errorf("creating clusters: %w", gerr)
	}
	defer unguard()
	done := make(chan error, 1)
	go func() {
		done <- parallel.ForEach(create, func(c model.ClusterPlan) error {
			err := p.createOne(ctx, plan, c, o.wait)
			if errors.Is(err, errNotOurs) {
				mu.Lock()
				foreign[c.KindName] = true
				mu.Unlock()
			}
			return err
		})
	}()
	var err error
	select {
	case err = <-done:
		if err == nil {
			return nil
		}
	case <-ctx.Done():
		p.logger.Warnf("interrupted: stopping the creation of %s", kindNames(create))
		p.rollback(plan, ours(), o.retain)
		<-done
		// A deletion that came before kind made its containers found
		// nothing, and kind went on: delete what it made since.
		if !o.retain {
			if err := p.deleteClusters(plan.Env, ours()); err != nil {
				p.logger.Errorf("deleting after interrupt: %v", err)
			}
		}
		return fmt.Errorf("creating clusters: %w", context.Cause(ctx))
	}
	p.rollback(plan, ours(), o.retain)
	return err
}

// WaitSystem waits until the kube-system workloads of the kind clusters res
// created (CoreDNS, kindnet, kube-proxy) are ready, as status requires of a
// Ready cluster, all in parallel, up to Up's wait; a cluster not ready in
// time is a warning, as at creation. Up waits for a new cluster's nodes
// alone so that these seconds (2–3 s measured for CoreDNS after the node)
// pass during the steps after it; callers wait here when they are done.
// Reused and healed clusters were already waited for.
func (p *Provider) WaitSystem(ctx context.Context, plan *model.Plan, res *UpResult, opts ...UpOption) error {
	o := upOptions{wait: DefaultWait}
	for _, opt := range opts {
		opt(&o)
	}
	if o.wait <= 0 || res == nil {
		return nil
	}
	var cs []model.ClusterPlan
	for _, r := range res.Clusters {
		c, ok := plan.Cluster(r.Name)
		if ok && !c.Existing && (r.Action == ActionCreated || r.Action == ActionRecreated) {
			cs = append(cs, c)
		}
	}
	return parallel.ForEach(cs, func(c model.ClusterPlan) error {
		ncs, err := p.nodeContainers(ctx, c.KindName)
		if err == nil {
			err = p.waitReady(ctx, c, o.wait, min(p.poll, createPoll), startsOf(ncs))
		}
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			p.logger.Warnf("%v", err)
		}
		return nil
	})
}

// errNotOurs marks a kind cluster that exists but that this process did
// not create.
var errNotOurs = errors.New("not created by this run")

// createPoll is how often a cluster being created, or healed after its
// nodes were started, is asked whether it is Ready: it turns Ready within
// seconds of its last node, and a status call costs milliseconds.
const createPoll = 500 * time.Millisecond

func (p *Provider) createOne(ctx context.Context, plan *model.Plan, c model.ClusterPlan, wait time.Duration) error {
	kubeconfig := p.KubeconfigPath(plan.Env, c.Name, false)
	if err := os.MkdirAll(p.clusterDir(plan.Env, c.Name), 0o700); err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	rec := model.Record{Env: plan.Env, Cluster: model.ClusterState{ClusterPlan: c}, Version: version.String(), CreatedAt: p.now().UTC(), Pools: &model.Pools{}}
	// Before kind makes a container: a run killed from here on leaves a
	// cluster that up and down know as this environment's, unfinished.
	if err := p.writeLocalRecord(rec, true); err != nil {
		return err
	}
	// kind's own wait runs `kubectl get nodes` in the node again and again
	// without pausing: clusters created side by side spend much of a
	// small machine's CPU on those execs while the others' kubeadm init
	// waits for it. meshctl waits below instead, from the host, through the
	// API, every createPoll.
	if err := p.kind.Create(c.KindName, plan.KindConfig(c), kubeconfig, 0); err != nil {
		// kind checks the name before it makes anything: this error means
		// the cluster is someone else's, and nothing of this run's.
		if strings.Contains(err.Error(), "already exist for a cluster with the name") {
			return fmt.Errorf("cluster %q: kind cluster %s was created meanwhile by another process (%w); leaving it alone: %v", c.Name, c.KindName, errNotOurs, err)
		}
		return fmt.Errorf("cluster %q: creating kind cluster %s: %w", c.Name, c.KindName, err)
	}
	ns, err := p.kind.ListNodes(c.KindName)
	if err != nil {
		return fmt.Errorf("cluster %q: listing nodes: %w", c.Name, err)
	}
	if err := installBoot(c, ns); err != nil {
		return err
	}
	// Empty pools, not none: a record without them was written by a meshctl
	// that did not record pools, whose blocks other environments must infer.
	if err := p.writeRecord(ns, rec); err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	if err := p.writeLocalRecord(rec, false); err != nil {
		return err
	}
	p.logger.V(1).Infof("cluster %q created as kind cluster %s", c.Name, c.KindName)
	if wait > 0 {
		// As kind's wait did: a cluster not Ready in time is a warning, not
		// a failed creation (the steps after it wait for what they need).
		// Its nodes only: its kube-system pods (CoreDNS) turn ready while
		// the steps after creation run, and WaitSystem waits for them at
		// the end.
		if err := p.waitReady(ctx, c, wait, min(p.poll, createPoll), nil); err != nil {
			if ctx.Err() != nil {
				return err
			}
			p.logger.Warnf("%v", err)
		}
	}
	return nil
}

// rollback exports the logs of clusters this run created, then deletes them
// unless retain. Errors are reported, not returned: the original failure is
// what the user needs to see.
func (p *Provider) rollback(plan *model.Plan, created []model.ClusterPlan, retain bool) {
	_ = parallel.ForEach(created, func(c model.ClusterPlan) error {
		dir := p.LogsDir(plan.Env, c.Name)
		if err := p.kind.CollectLogs(c.KindName, dir); err != nil {
			p.logger.Warnf("cluster %q: exporting logs: %v", c.Name, err)
		} else {
			p.logger.V(0).Infof("cluster %q: logs exported to %s", c.Name, dir)
		}
		if retain {
			p.logger.V(0).Infof("cluster %q: kept (--retain) as kind cluster %s", c.Name, c.KindName)
			return nil
		}
		if err := p.kind.Delete(c.KindName, p.KubeconfigPath(plan.Env, c.Name, false)); err != nil {
			p.logger.Errorf("cluster %q: deleting after failure: %v (delete it with `meshctl down %s`)", c.Name, err, c.KindName)
			return nil
		}
		_ = os.Remove(p.localRecordPath(plan.Env, c.Name))
		return nil
	})
}

// LogsDir is where a cluster's logs are exported.
func (p *Provider) LogsDir(env, cluster string) string {
	return p.clusterDir(env, cluster) + "/logs"
}

// adoptExisting makes an existing cluster part of the environment: its
// kubeconfig copied for other steps, its claim and its local record.
func (p *Provider) adoptExisting(ctx context.Context, plan *model.Plan, c model.ClusterState) error {
	if err := p.exportKubeconfigs(plan, c.ClusterPlan); err != nil {
		return err
	}
	return p.recordExisting(ctx, model.Record{Env: plan.Env, Cluster: c, Version: version.String(), CreatedAt: p.now().UTC()})
}

// splitExisting separates kind clusters from existing ones.
func splitExisting(cs []model.ClusterPlan) (kinds, existing []model.ClusterPlan) {
	for _, c := range cs {
		if c.Existing {
			existing = append(existing, c)
		} else {
			kinds = append(kinds, c)
		}
	}
	return kinds, existing
}

func meshNames(cs []model.ClusterPlan) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

func kindNames(cs []model.ClusterPlan) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.KindName
	}
	return strings.Join(names, ", ")
}
