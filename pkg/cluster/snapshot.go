package cluster

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster/nodes"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// snapshot lets a verb read each fact about the kind clusters once: the
// list of clusters, each cluster's node containers, their roles and
// addresses, kind's kubeconfig and meshctl's record. Without it a no-op
// `up` asked Docker the same questions some 300 times (every step
// re-listed every kind cluster on the machine and re-read every record,
// and each kubeconfig read inspected each node again).
//
// It only remembers while this Provider holds an environment's lock — one
// verb's run — and starts empty for every run, so the first read of a run
// always asks Docker: drift from before the run (a node restarted on
// another address, a cluster deleted or recreated, a record changed) is
// seen exactly as without it. Within the run the lock keeps other meshctl
// processes from changing the environment — its own, not the others:
// a reader of other environments asks again (List with WithFreshReads).
// What this process changes forgets what it changed: creating or deleting
// a cluster or starting its node containers (a container that starts may get another address)
// forgets everything, writing a record replaces the remembered one. Only
// successful reads are remembered, so a wait that polls (heal's waitReady)
// still polls. What is never remembered is what must be looked at each
// time: whether containers run (docker inspect .State), the API server's
// nodes, the routes on each node.
type snapshot struct {
	mu      sync.Mutex
	holders int // locks held through this Provider; remembering while > 0
	list    []string
	listed  bool
	nodes   map[string][]nodes.Node
	kubecfg map[kubecfgKey]string
	records map[string]model.Record
}

type freshKey struct{}

// WithFreshReads marks ctx so that List reads Docker and the records again
// even within a run that remembers: the run's lock keeps only its own
// environment still, and a reader of other environments' state that
// another meshctl may be changing at that moment (the gateway step's pool
// claims, which read every record again to see a claim made at the same
// time) must not be answered from memory.
func WithFreshReads(ctx context.Context) context.Context {
	return context.WithValue(ctx, freshKey{}, true)
}

func freshReads(ctx context.Context) bool { return ctx.Value(freshKey{}) != nil }

type kubecfgKey struct {
	name     string
	internal bool
}

// hold starts remembering (or keeps on, for a nested lock of another
// environment); the returned function stops when the last holder releases.
func (s *snapshot) hold() func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holders++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.holders--; s.holders == 0 {
				s.forgetLocked()
			}
		})
	}
}

// RememberReads has the Provider read each fact about the kind clusters
// once (see snapshot) until the returned function is called, as it does
// while it holds an environment's lock: for a reader that takes no lock and
// looks at the same clusters several ways in one run — status reads each
// cluster's nodes and kubeconfig for its health, its routes and the remote
// secrets it holds. Whether containers run, the API servers' answers and
// the routes on the nodes are still read every time.
func (p *Provider) RememberReads() (release func()) { return p.snap.hold() }

// forget drops everything remembered.
func (s *snapshot) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetLocked()
}

func (s *snapshot) forgetLocked() {
	s.list, s.listed = nil, false
	s.nodes, s.kubecfg, s.records = nil, nil, nil
}

func (s *snapshot) on() bool { return s.holders > 0 }

// record returns the remembered record of a kind cluster.
func (s *snapshot) record(kindName string) (*model.Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[kindName]
	if !ok {
		return nil, false
	}
	return &r, true
}

// setRecord remembers the record of a kind cluster (read or written).
func (s *snapshot) setRecord(kindName string, r model.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.on() {
		return
	}
	if s.records == nil {
		s.records = map[string]model.Record{}
	}
	s.records[kindName] = r
}

// forgetRecord drops the remembered record of a kind cluster (a write
// that may have failed half-way).
func (s *snapshot) forgetRecord(kindName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, kindName)
}

// snapshotKind is the Kind of a Provider: the kind library through the
// snapshot.
type snapshotKind struct {
	Kind
	s *snapshot
}

func (k snapshotKind) Create(name string, cfg *v1alpha4.Cluster, kubeconfigPath string, wait time.Duration) error {
	defer k.s.forget()
	return k.Kind.Create(name, cfg, kubeconfigPath, wait)
}

func (k snapshotKind) Delete(name, kubeconfigPath string) error {
	defer k.s.forget()
	return k.Kind.Delete(name, kubeconfigPath)
}

func (k snapshotKind) List() ([]string, error) {
	k.s.mu.Lock()
	if k.s.listed {
		defer k.s.mu.Unlock()
		return append([]string(nil), k.s.list...), nil
	}
	k.s.mu.Unlock()
	names, err := k.Kind.List()
	if err != nil {
		return nil, err
	}
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	if k.s.on() {
		k.s.list, k.s.listed = append([]string(nil), names...), true
	}
	return names, nil
}

func (k snapshotKind) ListNodes(name string) ([]nodes.Node, error) {
	k.s.mu.Lock()
	if ns, ok := k.s.nodes[name]; ok {
		defer k.s.mu.Unlock()
		return append([]nodes.Node(nil), ns...), nil
	}
	k.s.mu.Unlock()
	ns, err := k.Kind.ListNodes(name)
	if err != nil {
		return nil, err
	}
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	if !k.s.on() {
		return ns, nil
	}
	memo := make([]nodes.Node, len(ns))
	for i, n := range ns {
		memo[i] = &snapshotNode{Node: n}
	}
	if k.s.nodes == nil {
		k.s.nodes = map[string][]nodes.Node{}
	}
	k.s.nodes[name] = memo
	return append([]nodes.Node(nil), memo...), nil
}

func (k snapshotKind) KubeConfig(name string, internal bool) (string, error) {
	key := kubecfgKey{name, internal}
	k.s.mu.Lock()
	if kc, ok := k.s.kubecfg[key]; ok {
		defer k.s.mu.Unlock()
		return kc, nil
	}
	k.s.mu.Unlock()
	kc, err := k.Kind.KubeConfig(name, internal)
	if err != nil {
		return "", err
	}
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	if k.s.on() {
		if k.s.kubecfg == nil {
			k.s.kubecfg = map[kubecfgKey]string{}
		}
		k.s.kubecfg[key] = kc
	}
	return kc, nil
}

// snapshotNode remembers a node container's role (a label, fixed at
// creation) and addresses, each read with a docker inspect. The node
// itself is remembered only until a container of the snapshot is started.
type snapshotNode struct {
	nodes.Node

	mu         sync.Mutex
	role       string
	hasRole    bool
	ipv4, ipv6 string
	hasIP      bool
}

func (n *snapshotNode) Role() (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hasRole {
		return n.role, nil
	}
	r, err := n.Node.Role()
	if err != nil {
		return "", err
	}
	n.role, n.hasRole = r, true
	return r, nil
}

func (n *snapshotNode) IP() (ipv4, ipv6 string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hasIP {
		return n.ipv4, n.ipv6, nil
	}
	v4, v6, err := n.Node.IP()
	if err != nil {
		return "", "", err
	}
	n.ipv4, n.ipv6, n.hasIP = v4, v6, true
	return v4, v6, nil
}
