package remotesecret

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// Source gives an environment's clusters and their kubeconfigs;
// cluster.Provider is one.
type Source interface {
	Environment(ctx context.Context, env string) ([]model.ClusterState, error)
	// ClusterKubeconfig is an admin kubeconfig; internal selects the one
	// whose server is the address other clusters use (the kind network).
	ClusterKubeconfig(ctx context.Context, c model.ClusterPlan, internal bool) ([]byte, error)
}

// Manager creates the remote secrets of an environment.
type Manager struct {
	source  Source
	logger  log.Logger
	timeout time.Duration
	poll    time.Duration
	byName  bool
	clients *kubeclient.Factory
}

// Option configures a Manager.
type Option func(*Manager)

// WithLogger sets the logger. Tokens never reach it.
func WithLogger(l log.Logger) Option { return func(m *Manager) { m.logger = l } }

// WithTimeout bounds the wait for the token controller to fill a reader's
// token Secret (default 2m: a cluster just created may still be starting
// kube-controller-manager).
func WithTimeout(d time.Duration) Option { return func(m *Manager) { m.timeout = d } }

// WithServerByName names a kind cluster's API server by its container name
// on the kind network (https://<kind>-control-plane:6443), not its
// address: Docker's DNS resolves the name from nodes and pods, and the API
// server's certificate carries it, so the secret stays right when a Docker
// restart gives the node another address. Existing clusters keep the
// server their kubeconfig names; in clusters whose pods cannot resolve the
// names (existing, IPv6-only: resolvesNoNodeNames) a kind cluster's secret
// names its address.
func WithServerByName(b bool) Option { return func(m *Manager) { m.byName = b } }

// WithClients shares a kube-client factory (default: none).
func WithClients(f *kubeclient.Factory) Option { return func(m *Manager) { m.clients = f } }

// New returns a Manager that reads the environment from source.
func New(source Source, opts ...Option) *Manager {
	m := &Manager{source: source, logger: log.NoopLogger{}, timeout: 2 * time.Minute, poll: 500 * time.Millisecond}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Result is what Ensure did.
type Result struct {
	Env     string         `json:"env"`
	Readers []ReaderResult `json:"readers"`
	Secrets []SecretResult `json:"secrets"`
}

// ReaderResult is the reader account of one source cluster.
type ReaderResult struct {
	Cluster string `json:"cluster"`
	// TokenSecret is namespace/name of the reader's token Secret.
	TokenSecret string `json:"tokenSecret"`
	Action      string `json:"action"` // created or reused
}

// SecretResult is one remote secret.
type SecretResult struct {
	// Cluster is the cluster the secret gives access to.
	Cluster string `json:"cluster"`
	// Target is the cluster the secret is in.
	Target string `json:"target"`
	// Secret is namespace/name.
	Secret string `json:"secret"`
	// Server is the API server address inside the secret.
	Server string `json:"server"`
	Action string `json:"action"` // created, updated or unchanged
}

// endpoint is one cluster resolved for use: a client, and the address other
// clusters reach its API server at.
type endpoint struct {
	client kubernetes.Interface
	server string
	// byIP is the server by address, where server names a kind node: what
	// a cluster whose pods cannot resolve kind's names gets
	// (resolvesNoNodeNames).
	byIP string
	// err is why the cluster could not be resolved: Ensure writes nothing
	// then, Check reports it on each secret the cluster is part of.
	err error
}

// serverIn is the API server the remote secret of e names when target
// holds it: the one place Ensure, Check and Secret choose it, so that what
// status checks and remote-secret prints is what up writes.
func (e endpoint) serverIn(target model.ClusterPlan) string {
	if resolvesNoNodeNames(target) && e.byIP != "" {
		return e.byIP
	}
	return e.server
}

// Ensure creates or updates every remote secret env needs, concurrently. All
// clusters are resolved before anything is written, so a bad environment
// changes nothing.
func (m *Manager) Ensure(ctx context.Context, env string) (*Result, error) {
	cs, err := m.clusters(ctx, env)
	if err != nil {
		return nil, err
	}
	pairs := plan(cs)
	res := &Result{Env: env, Readers: []ReaderResult{}, Secrets: []SecretResult{}}
	if len(pairs) == 0 {
		return res, nil
	}
	sources, targets := map[string]bool{}, map[string]bool{}
	for _, p := range pairs {
		sources[p.source], targets[p.target] = true, true
	}
	// The reader accounts are made through the sources' clients.
	eps, err := m.resolve(ctx, cs, union(sources, targets), sources)
	if err != nil {
		return nil, err
	}

	names := sortedKeys(sources)
	creds := make([]credentials, len(names))
	res.Readers = make([]ReaderResult, len(names))
	err = each(len(names), func(i int) error {
		name := names[i]
		c, action, err := m.ensureReader(ctx, eps[name].client, isRemote(cs, name))
		if err != nil {
			return fmt.Errorf("cluster %q: reader account: %w", name, err)
		}
		m.logger.V(1).Infof("cluster %q: reader token secret %s/%s %s", name, Namespace, TokenSecret, action)
		creds[i] = c
		res.Readers[i] = ReaderResult{Cluster: name, TokenSecret: Namespace + "/" + TokenSecret, Action: action}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Every secret is built before any is written: a bad one changes
	// nothing.
	plans := byName(cs)
	secrets := make([]*corev1.Secret, len(pairs))
	res.Secrets = make([]SecretResult, len(pairs))
	for i, p := range pairs {
		server := eps[p.source].serverIn(plans[p.target])
		c := creds[slices.Index(names, p.source)]
		if secrets[i], err = Build(p.source, server, c.ca, c.token); err != nil {
			return nil, fmt.Errorf("cluster %q: %w", p.source, err)
		}
		res.Secrets[i] = SecretResult{Cluster: p.source, Target: p.target, Secret: Namespace + "/" + secrets[i].Name, Server: server}
	}
	err = each(len(pairs), func(i int) error {
		p := pairs[i]
		action, err := apply(ctx, eps[p.target].client, secrets[i])
		if err != nil {
			return fmt.Errorf("cluster %q: remote secret of %q: %w", p.target, p.source, err)
		}
		m.logger.V(1).Infof("cluster %q: remote secret %s/%s %s", p.target, Namespace, secrets[i].Name, action)
		res.Secrets[i].Action = action
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// SecretOption configures Secret.
type SecretOption func(*secretOptions)

type secretOptions struct{ holder string }

// For names the cluster of the environment that is to hold the secret
// (mesh or kind name): Secret then names the API server exactly as Ensure
// does in that cluster.
func For(holder string) SecretOption { return func(o *secretOptions) { o.holder = holder } }

// Secret returns the remote secret of one cluster, as `istioctl
// create-remote-secret` prints it, creating the cluster's reader account if
// it has none yet. It writes into no other cluster.
//
// Its API server is the one Ensure writes where the secret is held (For),
// by default in the environment's clusters that hold it (Ensure's targets:
// by address when any of them resolves no kind node names, as an IPv6-only
// or existing cluster does, since the address is what all of them reach;
// with no target, the other clusters of the environment, or with none, the
// cluster itself, as the likeliest kind of its peers elsewhere).
func (m *Manager) Secret(ctx context.Context, env, name string, opts ...SecretOption) (*corev1.Secret, error) {
	var o secretOptions
	for _, opt := range opts {
		opt(&o)
	}
	cs, err := m.clusters(ctx, env)
	if err != nil {
		return nil, err
	}
	name, err = find(cs, env, name)
	if err != nil {
		return nil, err
	}
	holder, err := holderOf(cs, env, name, o.holder)
	if err != nil {
		return nil, err
	}
	one := map[string]bool{name: true}
	eps, err := m.resolve(ctx, cs, one, one)
	if err != nil {
		return nil, err
	}
	creds, _, err := m.ensureReader(ctx, eps[name].client, isRemote(cs, name))
	if err != nil {
		return nil, fmt.Errorf("cluster %q: reader account: %w", name, err)
	}
	s, err := Build(name, eps[name].serverIn(holder), creds.ca, creds.token)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", name, err)
	}
	return s, nil
}

// holderOf is the cluster whose kind decides the server of name's secret
// (see Secret): the one named, else the first of the default holders that
// resolves no node names, else any of them.
func holderOf(cs []model.ClusterPlan, env, name, named string) (model.ClusterPlan, error) {
	plans := byName(cs)
	if named != "" {
		h, err := find(cs, env, named)
		if err != nil {
			return model.ClusterPlan{}, err
		}
		if h == name {
			return model.ClusterPlan{}, fmt.Errorf("cluster %q cannot hold a remote secret of itself (istiod reads its own cluster without one)", name)
		}
		return plans[h], nil
	}
	var holders []model.ClusterPlan
	for _, p := range plan(cs) {
		if p.source == name {
			holders = append(holders, plans[p.target])
		}
	}
	if len(holders) == 0 {
		for _, c := range cs {
			if c.Name != name {
				holders = append(holders, c)
			}
		}
	}
	if len(holders) == 0 {
		holders = []model.ClusterPlan{plans[name]}
	}
	for _, h := range holders {
		if resolvesNoNodeNames(h) {
			return h, nil
		}
	}
	return holders[0], nil
}

// find returns the mesh name of the cluster with the given mesh or kind name.
func find(cs []model.ClusterPlan, env, name string) (string, error) {
	known := make([]string, 0, len(cs))
	for _, c := range cs {
		if c.Name == name || c.KindName == name {
			return c.Name, nil
		}
		known = append(known, c.Name)
	}
	return "", fmt.Errorf("no cluster %q in environment %q (it has %s)", name, env, strings.Join(known, ", "))
}

func (m *Manager) clusters(ctx context.Context, env string) ([]model.ClusterPlan, error) {
	cs, err := m.source.Environment(ctx, env)
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("environment %q has no clusters (create it with `meshctl up`)", env)
	}
	return model.Plans(cs), nil
}

// resolve reads, concurrently, a client for every cluster in clients and the
// internal API server address of every cluster in servers. Every cluster
// named is in the map, those that failed with their err; the error joins
// theirs.
func (m *Manager) resolve(ctx context.Context, cs []model.ClusterPlan, clients, servers map[string]bool) (map[string]endpoint, error) {
	plans := byName(cs)
	names := sortedKeys(union(clients, servers))
	eps := make([]endpoint, len(names))
	err := each(len(names), func(i int) error {
		name := names[i]
		if clients[name] {
			kc, err := m.source.ClusterKubeconfig(ctx, plans[name], false)
			if err != nil {
				return eps[i].fail(fmt.Errorf("cluster %q: kubeconfig: %w", name, err))
			}
			kg := m.clients.Bytes(kc, "")
			if _, err := kg.RESTConfig(); err != nil {
				return eps[i].fail(fmt.Errorf("cluster %q: kubeconfig: %w", name, err))
			}
			client, err := kg.Kubernetes()
			if err != nil {
				return eps[i].fail(fmt.Errorf("cluster %q: client: %w", name, err))
			}
			eps[i].client = client
		}
		if !servers[name] {
			return nil
		}
		ikc, err := m.source.ClusterKubeconfig(ctx, plans[name], true)
		if err != nil {
			return eps[i].fail(fmt.Errorf("cluster %q: internal kubeconfig: %w", name, err))
		}
		icfg, err := m.clients.Bytes(ikc, "").RESTConfig()
		if err != nil {
			return eps[i].fail(fmt.Errorf("cluster %q: internal kubeconfig: %w", name, err))
		}
		if icfg.Host == "" {
			return eps[i].fail(fmt.Errorf("cluster %q: internal kubeconfig names no server", name))
		}
		eps[i].server = icfg.Host
		if m.byName && !plans[name].Existing && plans[name].KindName != "" {
			eps[i].byIP = icfg.Host
			eps[i].server = model.InternalAPIServer(plans[name])
		}
		return nil
	})
	out := map[string]endpoint{}
	for i, n := range names {
		out[n] = eps[i]
	}
	return out, err
}

// fail records why the endpoint could not be resolved, and returns it.
func (e *endpoint) fail(err error) error {
	e.err = err
	return err
}

// resolvesNoNodeNames says whether c's pods cannot resolve a kind node's
// name, so that remote secrets in c must name other clusters' API servers by
// address. An existing cluster is not on the kind network, where the names
// resolve. An IPv6-only kind cluster is, but its pods have no route to
// Docker's DNS: the node forwards queries to it from the kind network's
// IPv4 gateway only (Docker's resolver listens on 127.0.0.11 in the node),
// and CoreDNS there answers "server misbehaving" — measured with Istio's
// istiod, whose remote clusters never synced. Such a secret is right until
// the peer's node gets another address; `meshctl up` then rewrites it.
func resolvesNoNodeNames(c model.ClusterPlan) bool {
	return c.Existing || c.IPFamily == model.IPv6
}

// each runs f(0..n-1) concurrently and joins every error.
func each(n int, f func(int) error) error {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return parallel.ForEach(idx, f)
}

func union(a, b map[string]bool) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

func byName(cs []model.ClusterPlan) map[string]model.ClusterPlan {
	out := make(map[string]model.ClusterPlan, len(cs))
	for _, c := range cs {
		out[c.Name] = c
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
