package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/kind/pkg/cluster/nodes"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// countingKind counts what the Provider asks of kind, node roles and
// addresses included; failKubeconfig makes KubeConfig fail.
type countingKind struct {
	*fakeKind
	mu             sync.Mutex
	n              map[string]int
	failKubeconfig bool
}

func (k *countingKind) count(what string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n == nil {
		k.n = map[string]int{}
	}
	k.n[what]++
}

// reads returns the counts so far and starts again from zero.
func (k *countingKind) reads() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := k.n
	k.n = nil
	return n
}

func (k *countingKind) List() ([]string, error) { k.count("list"); return k.fakeKind.List() }

func (k *countingKind) ListNodes(name string) ([]nodes.Node, error) {
	k.count("nodes")
	ns, err := k.fakeKind.ListNodes(name)
	for i, n := range ns {
		ns[i] = countingNode{Node: n, k: k}
	}
	return ns, err
}

func (k *countingKind) KubeConfig(name string, internal bool) (string, error) {
	k.count("kubeconfig")
	k.mu.Lock()
	fail := k.failKubeconfig
	k.mu.Unlock()
	if fail {
		return "", errors.New("fake: docker exec failed")
	}
	return k.fakeKind.KubeConfig(name, internal)
}

type countingNode struct {
	nodes.Node
	k *countingKind
}

func (n countingNode) Role() (string, error) { n.k.count("role"); return n.Node.Role() }
func (n countingNode) IP() (string, string, error) {
	n.k.count("ip")
	return n.Node.IP()
}

// newCountingEnv is an environment of two clusters, up, whose kind reads
// are counted from then on.
func newCountingEnv(t *testing.T) (*env, *countingKind) {
	t.Helper()
	e := &env{kind: newFakeKind(), dir: t.TempDir()}
	e.docker = &fakeDocker{kind: e.kind}
	ck := &countingKind{fakeKind: e.kind}
	e.p = NewProvider(ProviderWithKind(ck), ProviderWithDocker(e.docker),
		ProviderWithNodeReader(fakeNodeReader{e.kind}), ProviderWithArtifacts(e.dir))
	if _, err := e.p.Up(context.Background(), mustPlan(t, model.Request{Clusters: 2})); err != nil {
		t.Fatal(err)
	}
	ck.reads()
	return e, ck
}

// internalServer reads cluster1's internal API server address as the
// remote-secrets step does (the kubeconfig, the nodes, their roles and the
// control plane's address).
func internalServer(t *testing.T, ctx context.Context, p *Provider) string {
	t.Helper()
	cs, err := p.Environment(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) == 0 {
		return ""
	}
	kc, err := p.ClusterKubeconfig(ctx, cs[0].ClusterPlan, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(kc), "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "server: "); ok {
			return s
		}
	}
	t.Fatalf("no server in %s", kc)
	return ""
}

// TestSnapshotReadsOnceWhileLocked: while the environment's lock is held,
// the steps that each list the environment and read kubeconfigs ask kind
// once for each fact; a run that follows (the lock taken again) asks
// again.
func TestSnapshotReadsOnceWhileLocked(t *testing.T) {
	t.Parallel()
	e, ck := newCountingEnv(t)
	for run := 1; run <= 2; run++ {
		ctx, unlock, err := e.p.LockEnv(context.Background(), "default", "up")
		if err != nil {
			t.Fatal(err)
		}
		for step := 0; step < 3; step++ {
			internalServer(t, ctx, e.p)
		}
		unlock()
		// 1 list; nodes of 2 clusters (records) — cluster1's read once;
		// 1 kubeconfig; the roles of the 2 control planes; 1 address.
		want := map[string]int{"list": 1, "nodes": 2, "kubeconfig": 1, "role": 2, "ip": 1}
		got := ck.reads()
		for k, n := range want {
			if got[k] != n {
				t.Errorf("run %d: %d %s reads, want %d (all: %v)", run, got[k], k, n, got)
			}
		}
	}
}

// TestSnapshotSeesDrift: each change that matters is seen by the next read
// — outside a lock, in the next run, after this run starts node containers
// or deletes a cluster, after it writes a record — and a failed read is
// not remembered.
func TestSnapshotSeesDrift(t *testing.T) {
	t.Parallel()
	moveNode := func(e *env) {
		c, _ := e.kind.cluster("cluster1")
		n := c.nodes[0]
		n.mu.Lock()
		n.ip = "172.18.9.9"
		n.mu.Unlock()
	}
	for _, tt := range []struct {
		name string
		// change happens between two reads of cluster1's internal server;
		// relock says whether the lock is released and taken again
		// around it (another run), locked whether reads are locked at all.
		change func(t *testing.T, ctx context.Context, e *env, ck *countingKind)
		relock bool
		locked bool
		// want is the server read after; "" the one read before.
		want string
	}{
		{name: "unlocked: nothing remembered", locked: false, want: "https://172.18.9.9:6443",
			change: func(t *testing.T, _ context.Context, e *env, _ *countingKind) { moveNode(e) }},
		{name: "next run: node moved", locked: true, relock: true, want: "https://172.18.9.9:6443",
			change: func(t *testing.T, _ context.Context, e *env, _ *countingKind) { moveNode(e) }},
		{name: "this run started the node", locked: true, want: "https://172.18.9.9:6443",
			change: func(t *testing.T, ctx context.Context, e *env, _ *countingKind) {
				moveNode(e)
				if err := e.p.startNodes(ctx, []string{"cluster1-control-plane"}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "this run deleted the cluster", locked: true, want: "none",
			change: func(t *testing.T, _ context.Context, e *env, _ *countingKind) {
				if err := e.p.deleteClusters("default", []model.ClusterPlan{{Name: "cluster1", KindName: "cluster1"}, {Name: "cluster2", KindName: "cluster2"}}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "remembered within a run (the control)", locked: true, want: "",
			change: func(t *testing.T, _ context.Context, e *env, _ *countingKind) { moveNode(e) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, ck := newCountingEnv(t)
			ctx, unlock := context.Background(), func() {}
			lock := func() {
				if !tt.locked {
					return
				}
				var err error
				if ctx, unlock, err = e.p.LockEnv(context.Background(), "default", "up"); err != nil {
					t.Fatal(err)
				}
			}
			lock()
			before := internalServer(t, ctx, e.p)
			if tt.want == "" {
				tt.want = before // the control: remembered
			}
			if tt.relock {
				unlock()
			}
			tt.change(t, ctx, e, ck)
			if tt.relock {
				lock()
			}
			got := internalServer(t, ctx, e.p)
			if got == "" {
				got = "none"
			}
			if got != tt.want {
				t.Errorf("after: server %q, want %q", got, tt.want)
			}
			unlock()
		})
	}
}

// TestSnapshotRecordsAndFailures: a record this run writes (SetPools) is
// what it reads next, without asking the node; a failed read is asked
// again.
func TestSnapshotRecordsAndFailures(t *testing.T) {
	t.Parallel()
	e, ck := newCountingEnv(t)
	ctx, unlock, err := e.p.LockEnv(context.Background(), "default", "up")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	pools := &model.Pools{DockerNetwork: "kind", CIDRs: []string{"172.18.255.0/28"}}
	if err := e.p.SetPools(ctx, "cluster1", pools); err != nil {
		t.Fatal(err)
	}
	rec, err := e.p.readRecord("cluster1")
	if err != nil || rec.Pools == nil || rec.Pools.CIDRs[0] != pools.CIDRs[0] {
		t.Fatalf("record after SetPools: %+v, %v", rec, err)
	}
	c, _ := e.kind.cluster("cluster1")
	if got := string(must(c.nodes[0].file("/kind/meshctl/cluster.json"))); !strings.Contains(got, pools.CIDRs[0]) {
		t.Errorf("the node's record lacks the pools: %s", got)
	}

	ck.reads()
	ck.mu.Lock()
	ck.failKubeconfig = true
	ck.mu.Unlock()
	cs, _ := e.p.Environment(ctx, "default")
	if _, err := e.p.ClusterKubeconfig(ctx, cs[0].ClusterPlan, false); err == nil {
		t.Fatal("kubeconfig read did not fail")
	}
	ck.mu.Lock()
	ck.failKubeconfig = false
	ck.mu.Unlock()
	if _, err := e.p.ClusterKubeconfig(ctx, cs[0].ClusterPlan, false); err != nil {
		t.Fatalf("a failed read was remembered: %v", err)
	}
	if n := ck.reads()["kubeconfig"]; n != 2 {
		t.Errorf("%d kubeconfig reads, want 2", n)
	}
}

func must(b []byte, ok bool) []byte {
	if !ok {
		return nil
	}
	return b
}

// TestSnapshotListReadsAgain: List with WithFreshReads (the gateway's pool
// claims, reading other environments) asks Docker again each time even
// while a run holds its lock — another environment's clusters and records
// change under it; without it, the second List is answered from memory.
func TestSnapshotListReadsAgain(t *testing.T) {
	t.Parallel()
	e, ck := newCountingEnv(t)
	ctx, unlock, err := e.p.LockEnv(context.Background(), "default", "up")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	for n := 1; n <= 2; n++ {
		if _, err := e.p.List(WithFreshReads(ctx)); err != nil {
			t.Fatal(err)
		}
		if got := ck.reads(); got["list"] != 1 || got["nodes"] != 2 {
			t.Errorf("fresh List %d: %d list and %d nodes reads, want 1 and 2 (all: %v)", n, got["list"], got["nodes"], got)
		}
	}
	if _, err := e.p.List(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ck.reads(); got["list"] != 0 || got["nodes"] != 0 {
		t.Errorf("List within the run: %v reads, want none (remembered)", got)
	}
}

// TestRememberReadsForStatus: status, and the check of the remote secrets
// after it (each cluster's kubeconfig and internal address, as
// pkg/connect/remotesecret reads them), ask kind once for each fact while
// RememberReads holds — status alone, not remembering, listed each
// cluster's nodes three times; now the check adds only the control planes'
// addresses. Released, the next run asks again.
func TestRememberReadsForStatus(t *testing.T) {
	t.Parallel()
	e, ck := newCountingEnv(t)
	ctx := context.Background()
	if _, err := e.p.Status(ctx, "default", ""); err != nil {
		t.Fatal(err)
	}
	alone := ck.reads() // for the failure message
	for run := 1; run <= 2; run++ {
		release := e.p.RememberReads()
		if _, err := e.p.Status(ctx, "default", ""); err != nil {
			t.Fatal(err)
		}
		cs, err := e.p.Environment(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			for _, internal := range []bool{false, true} {
				if _, err := e.p.ClusterKubeconfig(ctx, c.ClusterPlan, internal); err != nil {
					t.Fatal(err)
				}
			}
		}
		release()
		// 1 list; each cluster's nodes and kubeconfig once; the roles
		// of the 2 control planes; each control plane's address.
		want := map[string]int{"list": 1, "nodes": 2, "kubeconfig": 2, "role": 2, "ip": 2}
		got := ck.reads()
		for k, n := range want {
			if got[k] != n {
				t.Errorf("run %d: %d %s reads, want %d (all: %v; status alone, not remembering: %v)", run, got[k], k, n, got, alone)
			}
		}
	}
}
