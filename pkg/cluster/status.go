package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// StatusResult is an environment's state as `meshctl status` reports it.
type StatusResult struct {
	Env string `json:"env"`
	// Ready: every cluster is StateRunning.
	Ready bool `json:"ready"`
	// State is "Ready", or "Degraded" when a cluster is not running as
	// planned (Problems say why).
	State    string          `json:"state"`
	Problems []string        `json:"problems,omitempty"`
	Clusters []ClusterStatus `json:"clusters"`
	Registry *RegistryStatus `json:"registry,omitempty"`
}

// Environment states.
const (
	EnvReady    = "Ready"
	EnvDegraded = "Degraded"
)

// ClusterStatus is one cluster as recorded and its live health.
type ClusterStatus struct {
	model.ClusterState
	// LoadBalancerPools are the MetalLB address pools meshctl gave a kind
	// cluster (on environments of several networks), as recorded: where
	// the east-west gateway's address, and those of any LoadBalancer
	// Service a developer adds, come from. Unset when it has none.
	LoadBalancerPools *model.Pools `json:"loadBalancerPools,omitempty"`
	Ready             bool         `json:"ready"`
	// State is one of the State* constants.
	State string `json:"state"`
	// Problems say what is wrong when State is not StateRunning, and
	// what fixes it.
	Problems []string     `json:"problems,omitempty"`
	Nodes    []NodeStatus `json:"nodes"`
	// SystemNotReady are a kind cluster's kube-system workloads that are
	// not ready (CoreDNS, kindnet, kube-proxy) while its nodes are: a
	// restarted node's cluster, until its pods are back.
	SystemNotReady []string `json:"systemNotReady,omitempty"`
	Error          string   `json:"error,omitempty"`
}

// RegistryStatus is the local registry container's state.
type RegistryStatus struct {
	Name    string `json:"name"`
	Running bool   `json:"running"`
}

type noRoutesKey struct{}

// WithoutRouteCheck marks ctx so that Status does not check the routes to
// peer clusters on every node (one command per node), nor kube-system's
// pods (a docker inspect and six API requests per cluster): for a caller
// that reads Status for the clusters' nodes alone, such as the connect
// step's route plan, which re-asserts every route anyway, and the image
// step's node list. Such a status may say Ready with routes stale or
// CoreDNS not ready.
func WithoutRouteCheck(ctx context.Context) context.Context {
	return context.WithValue(ctx, noRoutesKey{}, true)
}

func skipRouteCheck(ctx context.Context) bool { return ctx.Value(noRoutesKey{}) != nil }

// Status reads the state of every cluster of env, concurrently: every
// cluster meshctl planned for it appears, whether its containers run, its
// API server answers, its nodes are Ready and its routes to the other
// clusters point at their current addresses. A cluster that cannot be read
// is reported, not fatal: status is what a person runs when something is
// wrong.
func (p *Provider) Status(ctx context.Context, env, registry string) (*StatusResult, error) {
	all, err := p.List(ctx)
	if err != nil {
		return nil, err
	}
	var es []Listed
	for _, e := range all {
		if e.Env() == env || (e.Incomplete != nil && e.Incomplete.Env == env) {
			es = append(es, e)
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].state().Name < es[j].state().Name })
	res := &StatusResult{Env: env, Clusters: make([]ClusterStatus, len(es))}
	_ = parallel.ForEach(indexes(len(es)), func(i int) error {
		res.Clusters[i] = p.clusterStatus(ctx, es[i])
		// A record written before gateways ran holds empty pools: the
		// same as none to a reader.
		if es[i].Record != nil {
			if pools := es[i].Record.Pools; pools != nil && len(pools.CIDRs) > 0 {
				res.Clusters[i].LoadBalancerPools = pools
			}
		}
		return nil
	})
	res.summarize()
	if registry != "" {
		out, err := p.docker.Run(ctx, "inspect", "--format", "{{.State.Running}}", registry)
		if err == nil || !strings.Contains(err.Error(), "No such") {
			res.Registry = &RegistryStatus{Name: registry, Running: err == nil && strings.TrimSpace(string(out)) == "true"}
		}
	}
	return res, nil
}

// summarize derives the environment's readiness, state and problems from
// its clusters'.
func (r *StatusResult) summarize() {
	r.Ready, r.Problems = len(r.Clusters) > 0, nil
	for _, c := range r.Clusters {
		r.Ready = r.Ready && c.Ready
		for _, pr := range c.Problems {
			r.Problems = append(r.Problems, fmt.Sprintf("cluster %q: %s", c.Name, pr))
		}
	}
	r.State = EnvReady
	if !r.Ready {
		r.State = EnvDegraded
	}
}

// AddProblems reports problems a check beyond the cluster's own health
// found on the cluster of that name (pkg/mesh checks the remote secrets it
// holds): the cluster is not Ready, its state becomes state unless it
// already has one of its own (stopped, routes stale...: what is wrong
// first stays its state, every problem is listed), and the environment is
// Degraded, its problems naming the cluster as its own do. A name that is
// not one of the clusters is ignored.
func (r *StatusResult) AddProblems(name, state string, problems ...string) {
	if len(problems) == 0 {
		return
	}
	for i := range r.Clusters {
		c := &r.Clusters[i]
		if c.Name != name {
			continue
		}
		if c.State == StateRunning || c.State == "" {
			c.State = state
		}
		c.Ready = false
		c.Problems = append(c.Problems, problems...)
		r.summarize()
		return
	}
}

// state is the cluster as recorded, its creation complete or not.
func (e Listed) state() model.ClusterState {
	if e.Incomplete != nil {
		return e.Incomplete.Cluster
	}
	if e.Record != nil {
		return e.Record.Cluster
	}
	return model.ClusterState{ClusterPlan: model.ClusterPlan{Name: e.KindName, KindName: e.KindName}}
}

func (p *Provider) clusterStatus(ctx context.Context, e Listed) ClusterStatus {
	c := e.state()
	fail := func(state, problem string) ClusterStatus {
		return ClusterStatus{ClusterState: c, State: state, Problems: []string{problem}, Nodes: []NodeStatus{}, Error: problem}
	}
	switch e.State {
	case StateMissing:
		return fail(StateMissing, fmt.Sprintf("kind cluster %s does not exist (deleted outside meshctl?): `meshctl up` creates it again", c.KindName))
	case StateIncomplete:
		return fail(StateIncomplete, fmt.Sprintf("the creation of kind cluster %s never finished (the run was killed): `meshctl up` recreates it, `meshctl down` deletes it", c.KindName))
	}
	var started map[string]time.Time // nil: the nodes alone are read
	if !c.Existing {
		cs, err := p.nodeContainers(ctx, c.KindName)
		if err != nil {
			return fail(StateNotReady, err.Error())
		}
		if stopped := stoppedOf(cs); len(stopped) > 0 {
			return fail(StateStopped, fmt.Sprintf("node containers not running: %s (`meshctl up` starts them)", strings.Join(stopped, ", ")))
		}
		if !skipRouteCheck(ctx) {
			started = startsOf(cs)
		}
	}
	st := p.readAPI(ctx, c.ClusterPlan, started)
	st.ClusterState = c
	switch {
	case st.Error != "":
		st.State = StateNotReady
		st.Problems = []string{"API server unreachable: " + st.Error}
	case !st.Ready:
		st.State = StateNotReady
		st.Problems = []string{notReadyWhy(st)}
	default:
		st.State = StateRunning
	}
	if st.State == StateRunning && !c.Existing && !skipRouteCheck(ctx) {
		if probs := p.routeProblems(ctx, c.KindName); len(probs) > 0 {
			st.Ready, st.State = false, StateRoutesStale
			st.Problems = append(probs, "routes to peer clusters are re-resolved every few seconds on each node; `meshctl up` (or `meshctl connect`) re-asserts them")
		}
	}
	return st
}

// readAPI reads a cluster's nodes from its API server, the live part of its
// ClusterStatus; given when a kind cluster's node containers started
// (startsOf), its kube-system workloads too. With started nil, Ready is
// about the nodes alone.
func (p *Provider) readAPI(ctx context.Context, c model.ClusterPlan, started map[string]time.Time) ClusterStatus {
	st := ClusterStatus{ClusterState: model.ClusterState{ClusterPlan: c}, Nodes: []NodeStatus{}}
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
	if sr, ok := p.nodes.(systemReader); ok && started != nil && st.Ready && !c.Existing {
		// An existing cluster's system is its owner's, whatever it runs.
		probs, err := sr.System(ctx, kc, started)
		if err != nil {
			probs = []string{err.Error()}
		}
		st.SystemNotReady = probs
		st.Ready = len(probs) == 0
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
