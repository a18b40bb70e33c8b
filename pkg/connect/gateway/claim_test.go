package gateway

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/internal/syncbuf"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// twoNetworks is a multi-network environment of n kind clusters.
func twoNetworks(env string, n int) []model.ClusterPlan {
	var out []model.ClusterPlan
	for i := range n {
		out = append(out, model.ClusterPlan{Name: fmt.Sprintf("cluster%d", i+1), KindName: fmt.Sprintf("%s-cluster%d", env, i+1),
			Network: fmt.Sprintf("network-%d", i%2+1), IPFamily: model.Dual})
	}
	return out
}

// countingMachine counts record writes.
type countingMachine struct {
	*machine
	writes atomic.Int32
}

func (m *countingMachine) SetPools(ctx context.Context, kindName string, pools *model.Pools) error {
	m.writes.Add(1)
	return m.machine.SetPools(ctx, kindName, pools)
}

// recordsOnly is a Source that has only the machine's records: all that
// claimPools reads.
type recordsOnly struct {
	records interface {
		List(context.Context) ([]cluster.Listed, error)
		SetPools(context.Context, string, *model.Pools) error
	}
}

func (r recordsOnly) Environment(context.Context, string) ([]model.ClusterState, error) {
	return nil, fmt.Errorf("not here")
}
func (r recordsOnly) ClusterKubeconfig(context.Context, model.ClusterPlan, bool) ([]byte, error) {
	return nil, fmt.Errorf("not here")
}
func (r recordsOnly) List(ctx context.Context) ([]cluster.Listed, error) {
	return r.records.List(ctx)
}
func (r recordsOnly) SetPools(ctx context.Context, kindName string, p *model.Pools) error {
	return r.records.SetPools(ctx, kindName, p)
}

func claimer(src Source) *Installer {
	i := New(src, WithSubnets(prefixes("172.18.0.0/16", "fc00:f853:ccd:e793::/64")...))
	i.claimPause = time.Millisecond
	return i
}

func claim(src Source, env string, plans []model.ClusterPlan) ([][]netip.Prefix, error) {
	i := claimer(src)
	return i.claimPools(context.Background(), env, plans, i.subnets)
}

// Environments connected one after the other get disjoint pools, recorded
// in their clusters' records; reconnecting changes and writes nothing; an
// environment an older meshctl connected (nothing recorded) is avoided, and
// keeps its blocks when the new meshctl reconnects it.
func TestClaimPools(t *testing.T) {
	t.Parallel()
	m := &countingMachine{machine: newMachine()}
	legacy := twoNetworks("old", 2)
	m.addLegacy("old", legacy...) // blocks 1 and 2, unrecorded
	a, b := twoNetworks("a", 2), twoNetworks("b", 3)
	m.add("a", a...)
	m.add("b", b...)

	envs := []struct {
		env   string
		plans []model.ClusterPlan
	}{{"a", a}, {"b", b}, {"old", legacy}}
	got := map[string]string{}
	for _, e := range envs {
		pools, err := claim(recordsOnly{m}, e.env, e.plans)
		if err != nil {
			t.Fatalf("%s: %v", e.env, err)
		}
		for k, p := range e.plans {
			got[p.KindName] = join(pools[k])
			if rec := strings.Join(m.pools(p.KindName), ","); rec != got[p.KindName] {
				t.Errorf("%s: recorded %s, claimed %s", p.KindName, rec, got[p.KindName])
			}
		}
	}
	want := map[string]string{
		"old-cluster1": "172.18.255.224/28,fc00:f853:ccd:e793:ffff:ffff:ffff:ffe0/124",
		"old-cluster2": "172.18.255.208/28,fc00:f853:ccd:e793:ffff:ffff:ffff:ffd0/124",
		"a-cluster1":   "172.18.255.192/28,fc00:f853:ccd:e793:ffff:ffff:ffff:ffc0/124",
		"a-cluster2":   "172.18.255.176/28,fc00:f853:ccd:e793:ffff:ffff:ffff:ffb0/124",
		"b-cluster1":   "172.18.255.160/28,fc00:f853:ccd:e793:ffff:ffff:ffff:ffa0/124",
		"b-cluster2":   "172.18.255.144/28,fc00:f853:ccd:e793:ffff:ffff:ffff:ff90/124",
		"b-cluster3":   "172.18.255.128/28,fc00:f853:ccd:e793:ffff:ffff:ffff:ff80/124",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: pools %s, want %s", k, got[k], w)
		}
	}
	writes := m.writes.Load()
	for _, e := range envs {
		pools, err := claim(recordsOnly{m}, e.env, e.plans)
		if err != nil {
			t.Fatal(err)
		}
		for k, p := range e.plans {
			if join(pools[k]) != want[p.KindName] {
				t.Errorf("reconnecting %s: %s moved to %s", e.env, p.KindName, join(pools[k]))
			}
		}
	}
	if n := m.writes.Load() - writes; n != 0 {
		t.Errorf("reconnecting wrote %d records, want none", n)
	}

	// Deleting environment a frees its blocks for the next one.
	m.mu.Lock()
	delete(m.records, "a-cluster1")
	delete(m.records, "a-cluster2")
	m.mu.Unlock()
	c := twoNetworks("c", 2)
	m.add("c", c...)
	pools, err := claim(recordsOnly{m}, "c", c)
	if err != nil || join(pools[0]) != want["a-cluster1"] || join(pools[1]) != want["a-cluster2"] {
		t.Errorf("after a is deleted, c gets %v (%v), want a's blocks", pools, err)
	}
}

// An existing cluster holds no pool; a full subnet fails before any record
// is written, naming who holds the blocks.
func TestClaimPoolsFullSubnet(t *testing.T) {
	t.Parallel()
	m := &countingMachine{machine: newMachine()}
	a := twoNetworks("a", 6)
	m.add("a", a...)
	b := append(twoNetworks("b", 2), model.ClusterPlan{Name: "cloud", Network: "network-3", Existing: true})
	m.add("b", b...)
	i := New(recordsOnly{m}, WithSubnets(netip.MustParsePrefix("192.168.1.0/24")))
	if _, err := i.claimPools(context.Background(), "a", a, i.subnets); err != nil {
		t.Fatal(err)
	}
	writes := m.writes.Load()
	_, err := i.claimPools(context.Background(), "b", b, i.subnets)
	if err == nil || !strings.Contains(err.Error(), `docker network "kind" subnet 192.168.1.0/24 has no free block of 16 load-balancer addresses for cluster cluster2: its 7 blocks`) ||
		!strings.Contains(err.Error(), `used: 6 by environment "a", 1 by this environment ("b")`) {
		t.Fatalf("err = %v, want the full subnet explained", err)
	}
	if n := m.writes.Load() - writes; n != 0 {
		t.Errorf("%d records written before the error, want none", n)
	}
}

// Environments claiming at the same moment on a fresh machine — every read
// and write of a record interleaved with the others' — end with disjoint
// pools, each as recorded.
func TestClaimPoolsConcurrent(t *testing.T) {
	t.Parallel()
	var out syncbuf.Buffer
	logger := cli.NewLogger(&out, cli.WithVerbosity(1))
	defer func() { t.Logf("%d collisions in 20 rounds", strings.Count(out.String(), "collided")) }()
	for round := range 20 {
		m := newMachine()
		m.pause = func(string) { time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) }
		envs := map[string][]model.ClusterPlan{}
		for e := range 4 {
			name := fmt.Sprintf("e%d", e)
			envs[name] = twoNetworks(name, 2)
			m.add(name, envs[name]...)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		claimed := map[string][]netip.Prefix{}
		for env, plans := range envs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				i := claimer(recordsOnly{m})
				i.logger = logger
				pools, err := i.claimPools(context.Background(), env, plans, i.subnets)
				if err != nil {
					t.Errorf("round %d: %s: %v", round, env, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for k, p := range plans {
					claimed[p.KindName] = pools[k]
				}
			}()
		}
		wg.Wait()
		var seen []string
		for kind, ps := range claimed {
			if rec := strings.Join(m.pools(kind), ","); rec != join(ps) {
				t.Errorf("round %d: %s recorded %s, claimed %s", round, kind, rec, join(ps))
			}
			for _, p := range ps {
				for other, qs := range claimed {
					for _, q := range qs {
						if other != kind && p.Overlaps(q) {
							t.Errorf("round %d: %s and %s share %s / %s", round, kind, other, p, q)
						}
					}
				}
			}
			seen = append(seen, kind)
		}
		if len(seen) != 8 {
			t.Errorf("round %d: %d clusters claimed pools, want 8", round, len(seen))
		}
	}
}

// Two environments that read the records at the same moment pick the same
// blocks and both claim them: the collision is seen, and they end disjoint.
func TestClaimPoolsCollision(t *testing.T) {
	t.Parallel()
	m := newMachine()
	a, b := twoNetworks("a", 2), twoNetworks("b", 2)
	m.add("a", a...)
	m.add("b", b...)
	var lists atomic.Int32
	bothRead := make(chan struct{})
	m.pause = func(op string) {
		if op != "list" {
			return
		}
		switch lists.Add(1) {
		case 1:
			<-bothRead
		case 2:
			close(bothRead)
		}
	}
	var out syncbuf.Buffer
	logger := cli.NewLogger(&out, cli.WithVerbosity(1))
	got := make([][][]netip.Prefix, 2)
	var wg sync.WaitGroup
	for k, plans := range [][]model.ClusterPlan{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := claimer(recordsOnly{m})
			i.logger = logger
			var err error
			if got[k], err = i.claimPools(context.Background(), []string{"a", "b"}[k], plans, i.subnets); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if !strings.Contains(out.String(), "collided with cluster") {
		t.Errorf("no collision seen; log:\n%s", out.String())
	}
	for _, p := range got[0] {
		for _, q := range got[1] {
			for _, x := range p {
				for _, y := range q {
					if x.Overlaps(y) {
						t.Errorf("a and b share %s / %s", x, y)
					}
				}
			}
		}
	}
	for k, plans := range [][]model.ClusterPlan{a, b} {
		for j, p := range plans {
			if rec := strings.Join(m.pools(p.KindName), ","); rec != join(got[k][j]) {
				t.Errorf("%s recorded %s, claimed %s", p.KindName, rec, join(got[k][j]))
			}
		}
	}
}

// Two environments an older meshctl connected hold the same blocks (the
// collision this allocation prevents). The first reconnected with this
// meshctl moves, saying so; the other then keeps its blocks.
func TestClaimPoolsMovesAnOldCollision(t *testing.T) {
	t.Parallel()
	m := newMachine()
	x, old := twoNetworks("x", 2), twoNetworks("old", 2)
	m.addLegacy("x", x...)
	m.addLegacy("old", old...)
	var out syncbuf.Buffer
	i := claimer(recordsOnly{m})
	i.logger = cli.NewLogger(&out)
	xPools, err := i.claimPools(context.Background(), "x", x, i.subnets)
	if err != nil {
		t.Fatal(err)
	}
	want := "cluster1: an older meshctl gave it the load-balancer pool 172.18.255.224/28, which another environment holds: it moves to 172.18.255.192/28,fc00:f853:ccd:e793:ffff:ffff:ffff:ffc0/124"
	if w := out.String(); !strings.Contains(w, want) || strings.Count(w, "older meshctl") != 4 {
		t.Errorf("log:\n%s\nwant a warning for each family of both clusters, like %q", w, want)
	}
	out.Reset()
	oldPools, err := i.claimPools(context.Background(), "old", old, i.subnets)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(oldPools); got != "[[172.18.255.224/28 fc00:f853:ccd:e793:ffff:ffff:ffff:ffe0/124] [172.18.255.208/28 fc00:f853:ccd:e793:ffff:ffff:ffff:ffd0/124]]" {
		t.Errorf("old's pools %s, want the blocks it had", got)
	}
	if w := out.String(); w != "" {
		t.Errorf("old kept its blocks but logged %s", w)
	}
	for k := range old {
		for _, p := range oldPools[k] {
			for _, xs := range xPools {
				for _, q := range xs {
					if p.Overlaps(q) {
						t.Errorf("old's pool %s overlaps x's %s", p, q)
					}
				}
			}
		}
	}
}
