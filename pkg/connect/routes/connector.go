package routes

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/pkg/cluster"
)

// Source reports an environment's clusters and their nodes; cluster.Provider
// is one.
type Source interface {
	Status(ctx context.Context, env, registry string) (*cluster.StatusResult, error)
}

// Connector connects the clusters of an environment.
type Connector struct {
	exec    Executor
	source  Source
	logger  log.Logger
	timeout time.Duration
	poll    time.Duration
}

// Option configures a Connector.
type Option func(*Connector)

// WithLogger sets the logger.
func WithLogger(l log.Logger) Option { return func(c *Connector) { c.logger = l } }

// WithTimeout bounds the wait for every node to have its pod CIDRs: freshly
// created clusters get them from kube-controller-manager a little after the
// nodes register.
func WithTimeout(d time.Duration) Option { return func(c *Connector) { c.timeout = d } }

// New returns a Connector that reads clusters from source and changes nodes
// through exec.
func New(exec Executor, source Source, opts ...Option) *Connector {
	c := &Connector{exec: exec, source: source, logger: log.NoopLogger{}, timeout: 2 * time.Minute, poll: 2 * time.Second}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Result is what Connect did.
type Result struct {
	Env   string       `json:"env"`
	Nodes []NodeResult `json:"nodes"`
}

// NodeResult is the routes one node got.
type NodeResult struct {
	Cluster string   `json:"cluster"`
	Node    string   `json:"node"`
	Routes  []string `json:"routes"`
}

// Connect routes every node of env to the pods and services of the other
// clusters on its network. It is idempotent; a cluster added later is
// connected by running it again.
func (c *Connector) Connect(ctx context.Context, env string) (*Result, error) {
	plan, err := c.plan(ctx, env)
	if err != nil {
		return nil, err
	}
	if err := ApplyAndInstall(ctx, c.exec, plan); err != nil {
		return nil, err
	}
	res := &Result{Env: env, Nodes: []NodeResult{}}
	for _, nr := range plan {
		r := NodeResult{Cluster: nr.Cluster, Node: nr.Node, Routes: []string{}}
		for _, rt := range nr.Routes {
			r.Routes = append(r.Routes, rt.String())
		}
		res.Nodes = append(res.Nodes, r)
	}
	return res, nil
}

// plan reads the environment until every node has its pod CIDRs, then
// computes the routes. Nothing is applied until the whole plan is known.
func (c *Connector) plan(ctx context.Context, env string) ([]NodeRoutes, error) {
	deadline := time.Now().Add(c.timeout)
	for {
		// The routes are re-asserted whatever a check would find.
		st, err := c.source.Status(cluster.WithoutRouteCheck(ctx), env, "")
		if err != nil {
			return nil, err
		}
		if len(st.Clusters) == 0 {
			return nil, fmt.Errorf("environment %q has no clusters (create it with `meshctl up`)", env)
		}
		clusters, err := FromStatus(st)
		if err == nil {
			var plan []NodeRoutes
			if plan, err = RoutePlan(clusters); err == nil {
				return plan, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("connecting environment %q: %w", env, err)
		}
		c.logger.V(1).Infof("waiting to connect: %v", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connecting environment %q: %w", env, context.Cause(ctx))
		case <-time.After(c.poll):
		}
	}
}

// FromStatus models the clusters of a status report for routing. Cluster
// names are kind names: they address the nodes.
//
// Existing (non-kind) clusters are left out: meshctl cannot run commands on
// their nodes, nor would kind nodes reach their pod addresses through the
// kind network. The plan refuses an existing cluster on a kind cluster's
// network unless the topology says its pods are routable already.
func FromStatus(st *cluster.StatusResult) ([]Cluster, error) {
	var out []Cluster
	for _, cs := range st.Clusters {
		if cs.Existing {
			continue
		}
		if cs.Error != "" {
			return nil, fmt.Errorf("cluster %q: %s", cs.Name, cs.Error)
		}
		c := Cluster{Name: cs.KindName, Network: cs.Network}
		for _, s := range cs.ServiceSubnets {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("cluster %q: service subnet %q: %w", cs.Name, s, err)
			}
			c.ServiceSubnets = append(c.ServiceSubnets, p)
		}
		for _, ns := range cs.Nodes {
			n := Node{Name: ns.Name, ControlPlane: ns.Role == "control-plane"}
			for _, ip := range ns.IPs {
				a, err := netip.ParseAddr(ip)
				if err != nil {
					return nil, fmt.Errorf("cluster %q: node %s: address %q: %w", cs.Name, ns.Name, ip, err)
				}
				n.IPs = append(n.IPs, a)
			}
			for _, p := range ns.PodCIDRs {
				pr, err := netip.ParsePrefix(p)
				if err != nil {
					return nil, fmt.Errorf("cluster %q: node %s: podCIDR %q: %w", cs.Name, ns.Name, p, err)
				}
				n.PodCIDRs = append(n.PodCIDRs, pr)
			}
			c.Nodes = append(c.Nodes, n)
		}
		out = append(out, c)
	}
	return out, nil
}
