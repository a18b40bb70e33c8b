package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// reqs is n clusters c1..cn of one IP family, none holding a pool.
func reqs(n int, family string) []request {
	out := make([]request, n)
	for i := range out {
		out[i] = request{name: fmt.Sprintf("c%d", i+1), ipFamily: family, prefer: uint64(i + 1)}
	}
	return out
}

func TestAllocate(t *testing.T) {
	t.Parallel()
	held := func(env string, pools ...string) holder {
		return holder{env: env, cluster: env + "-c", pools: prefixes(pools...)}
	}
	for _, tc := range []struct {
		name    string
		subnets []string
		reqs    []request
		size    int // default 16
		taken   []holder
		want    [][]string
		wantErr string
	}{
		{name: "alone on kind's default IPv4 network: blocks 1 and 2 from the top", subnets: []string{"172.18.0.0/16"}, reqs: reqs(2, model.IPv4),
			want: [][]string{{"172.18.255.224/28"}, {"172.18.255.208/28"}}},
		{name: "IPv6 only", subnets: []string{"fc00:f853:ccd:e793::/64"}, reqs: reqs(2, model.IPv6),
			want: [][]string{{"fc00:f853:ccd:e793:ffff:ffff:ffff:ffe0/124"}, {"fc00:f853:ccd:e793:ffff:ffff:ffff:ffd0/124"}}},
		{name: "dual stack: one pool per family", subnets: []string{"172.18.0.0/16", "fc00:f853:ccd:e793::/64"}, reqs: reqs(1, model.Dual),
			want: [][]string{{"172.18.255.224/28", "fc00:f853:ccd:e793:ffff:ffff:ffff:ffe0/124"}}},
		{name: "v6 listed first keeps docker's order", subnets: []string{"fc00::/64", "10.0.0.0/24"}, reqs: reqs(1, model.Dual), size: 8,
			want: [][]string{{"fc00::ffff:ffff:ffff:fff0/125", "10.0.0.240/29"}}},
		{name: "a cluster gets only its own families", subnets: []string{"172.18.0.0/16", "fc00::/64"},
			reqs: []request{{name: "v4", ipFamily: model.IPv4, prefer: 1}, {name: "v6", ipFamily: model.IPv6, prefer: 2}, {name: "default", prefer: 3}},
			want: [][]string{{"172.18.255.224/28"}, {"fc00::ffff:ffff:ffff:ffd0/124"}, {"172.18.255.192/28"}}},
		{name: "dual cluster on an IPv4 network", subnets: []string{"172.18.0.0/16"}, reqs: reqs(1, model.Dual),
			want: [][]string{{"172.18.255.224/28"}}},
		{name: "only the first subnet of a family", subnets: []string{"172.18.0.0/16", "172.19.0.0/16"}, reqs: reqs(1, model.IPv4),
			want: [][]string{{"172.18.255.224/28"}}},
		{name: "unmasked subnet", subnets: []string{"172.18.3.4/16"}, reqs: reqs(1, model.IPv4),
			want: [][]string{{"172.18.255.224/28"}}},
		{name: "borrow across bytes", subnets: []string{"10.1.0.0/16"}, reqs: reqs(16, model.IPv4),
			want: func() [][]string {
				w := make([][]string, 16)
				w[14] = []string{"10.1.255.0/28"}
				w[15] = []string{"10.1.254.240/28"}
				return w
			}()},
		{name: "exactly half of a /24", subnets: []string{"192.168.1.0/24"}, reqs: reqs(7, model.IPv4),
			want: func() [][]string {
				w := make([][]string, 7)
				w[6] = []string{"192.168.1.128/28"}
				return w
			}()},

		{name: "another environment's blocks are avoided", subnets: []string{"172.18.0.0/16"}, reqs: reqs(2, model.IPv4),
			taken: []holder{held("a", "172.18.255.224/28"), held("a", "172.18.255.208/28")},
			want:  [][]string{{"172.18.255.192/28"}, {"172.18.255.176/28"}}},
		{name: "free blocks between taken ones are used, nearest the top first", subnets: []string{"172.18.0.0/16"}, reqs: reqs(3, model.IPv4),
			taken: []holder{held("a", "172.18.255.224/28"), held("b", "172.18.255.192/28")},
			want:  [][]string{{"172.18.255.208/28"}, {"172.18.255.176/28"}, {"172.18.255.160/28"}}},
		{name: "a taken pool of another size covers several blocks", subnets: []string{"172.18.0.0/16"}, reqs: reqs(1, model.IPv4),
			taken: []holder{held("a", "172.18.255.192/27", "172.18.255.224/28")},
			want:  [][]string{{"172.18.255.176/28"}}},
		{name: "IPv6 blocks of other environments are avoided too", subnets: []string{"172.18.0.0/16", "fc00::/64"}, reqs: reqs(1, model.Dual),
			taken: []holder{held("a", "172.18.255.224/28", "fc00::ffff:ffff:ffff:ffe0/124"), held("v6only", "fc00::ffff:ffff:ffff:ffd0/124")},
			want:  [][]string{{"172.18.255.208/28", "fc00::ffff:ffff:ffff:ffc0/124"}}},
		{name: "a search from a block wraps around", subnets: []string{"192.168.1.0/24"},
			reqs:  []request{{name: "from6", from: 6}, {name: "from20", from: 20}, {name: "wraps", from: 7}},
			taken: []holder{held("a", "192.168.1.224/28")},
			want:  [][]string{{"192.168.1.144/28"}, {"192.168.1.128/28"}, {"192.168.1.208/28"}}}, // blocks 6, 7 (20 wraps to 6, used), 2 (7 used, wraps past 1, taken)
		{name: "held blocks are kept, and kept first", subnets: []string{"172.18.0.0/16"},
			reqs: []request{{name: "new", prefer: 1}, {name: "old", prefer: 2, have: prefixes("172.18.255.224/28")}, {name: "far", prefer: 3, have: prefixes("172.18.200.0/28")}},
			want: [][]string{{"172.18.255.208/28"}, {"172.18.255.224/28"}, {"172.18.200.0/28"}}},
		{name: "a held block outside the subnet is replaced", subnets: []string{"172.19.0.0/16"},
			reqs: []request{{name: "moved", prefer: 1, have: prefixes("172.18.255.224/28")}},
			want: [][]string{{"172.19.255.224/28"}}},

		{name: "full: a /24 for 8 clusters", subnets: []string{"192.168.1.0/24"}, reqs: reqs(8, model.IPv4),
			wantErr: `docker network "kind" subnet 192.168.1.0/24 has no free block of 16 load-balancer addresses for cluster c8: its 7 blocks (the top half of the subnet, the topmost block skipped) are used: 7 by this environment ("c")`},
		{name: "full: other environments named", subnets: []string{"192.168.1.0/24"}, reqs: reqs(2, model.IPv4),
			taken: []holder{held("a", "192.168.1.224/28"), held("a", "192.168.1.208/28"), held("a", "192.168.1.192/28"),
				held("b", "192.168.1.176/28"), held("b", "192.168.1.160/28"), held("b", "192.168.1.144/28")},
			wantErr: `are used: 3 by environment "a", 3 by environment "b", 1 by this environment ("c"); delete an environment`},
		{name: "full: IPv6", subnets: []string{"172.18.0.0/16", "fd00::/120"}, reqs: reqs(10, model.Dual),
			wantErr: "subnet fd00::/120 has no free block of 16 load-balancer addresses for cluster c8"},
		{name: "too small for one block", subnets: []string{"10.0.0.0/30"}, reqs: reqs(1, model.IPv4), size: 4, wantErr: "subnet 10.0.0.0/30 is too small"},
		{name: "no subnet of the cluster's family", subnets: []string{"172.18.0.0/16"}, reqs: reqs(1, model.IPv6),
			wantErr: `cluster c1 (ipv6): docker network "kind" has no subnet of its IP family`},
		{name: "no subnet", reqs: reqs(1, model.IPv4), wantErr: `docker network "kind" has no subnet`},
		{name: "size not a power of two", subnets: []string{"172.18.0.0/16"}, reqs: reqs(1, model.IPv4), size: 10, wantErr: "power of two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			size := tc.size
			if size == 0 {
				size = 16
			}
			got, err := allocate("kind", prefixes(tc.subnets...), size, "c", tc.reqs, tc.taken)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.reqs) {
				t.Fatalf("got %d pools, want %d", len(got), len(tc.reqs))
			}
			for i, w := range tc.want {
				if w != nil && fmt.Sprint(got[i]) != fmt.Sprint(prefixes(w...)) {
					t.Errorf("cluster %d: got %v, want %v", i, got[i], w)
				}
			}
		})
	}
}

// TestAllocateDisjoint connects environments one after the other on IPv4,
// IPv6 and dual-stack networks, then reconnects each, and checks that no
// two clusters share an address, that no pool reaches the bottom half of
// the subnet (docker's addresses), the top block or the IPv4 broadcast
// address, and that reconnecting moves nothing.
func TestAllocateDisjoint(t *testing.T) {
	t.Parallel()
	for _, subnets := range [][]string{
		{"172.18.0.0/16"},
		{"fc00:f853:ccd:e793::/64"},
		{"172.18.0.0/16", "fc00:f853:ccd:e793::/64"},
		{"10.89.0.0/24", "fd00:1::/112"},
	} {
		nets := prefixes(subnets...)
		size := 16
		if nets[0].Bits() == 24 {
			size = 4
		}
		envs := map[string][][]netip.Prefix{}
		var order []string
		taken := func(except string) []holder {
			var hs []holder
			for _, e := range order {
				if e == except {
					continue
				}
				for i, ps := range envs[e] {
					hs = append(hs, holder{env: e, cluster: fmt.Sprint(i), pools: ps})
				}
			}
			return hs
		}
		for n := 1; n <= 5; n++ {
			env := fmt.Sprintf("env%d", n)
			got, err := allocate("kind", nets, size, env, reqs(n, model.Dual), taken(env))
			if err != nil {
				t.Fatalf("%v, %s: %v", subnets, env, err)
			}
			envs[env] = got
			order = append(order, env)
		}
		var all []netip.Prefix
		for _, e := range order {
			for i, ps := range envs[e] {
				if len(ps) != len(nets) {
					t.Fatalf("%v: %s cluster %d got %v, want one pool per family", subnets, e, i, ps)
				}
				for j, p := range ps {
					s := nets[j]
					if !s.Contains(p.Addr()) || !s.Contains(lastAddr(p)) {
						t.Errorf("%v: pool %s is outside %s", subnets, p, s)
					}
					if lastAddr(p) == lastAddr(s) {
						t.Errorf("%v: pool %s holds the subnet's last address", subnets, p)
					}
					if half := netip.PrefixFrom(s.Addr(), s.Bits()+1); half.Contains(p.Addr()) {
						t.Errorf("%v: pool %s reaches the bottom half %s", subnets, p, half)
					}
					for _, q := range all {
						if q.Overlaps(p) {
							t.Errorf("%v: %s cluster %d's pool %s overlaps %s", subnets, e, i, p, q)
						}
					}
					all = append(all, p)
				}
			}
		}
		for _, e := range order {
			rs := reqs(len(envs[e]), model.Dual)
			for i := range rs {
				rs[i].have = envs[e][i]
			}
			again, err := allocate("kind", nets, size, e, rs, taken(e))
			if err != nil || fmt.Sprint(again) != fmt.Sprint(envs[e]) {
				t.Errorf("%v: reconnecting %s gives %v (%v), first %v", subnets, e, again, err, envs[e])
			}
		}
	}
}

func TestHolders(t *testing.T) {
	t.Parallel()
	rec := func(env, name, network string, pools *model.Pools) cluster.Listed {
		return cluster.Listed{KindName: env + "-" + name, Record: &model.Record{Env: env,
			Cluster: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: name, KindName: env + "-" + name, Network: network}}, Pools: pools}}
	}
	recorded := func(cidrs ...string) *model.Pools { return &model.Pools{DockerNetwork: "kind", CIDRs: cidrs} }
	existing := cluster.Listed{Record: &model.Record{Env: "old", Cluster: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "a-cloud", Network: "n2", Existing: true}}}}
	all := []cluster.Listed{
		rec("new", "c1", "n1", recorded("172.18.255.224/28", "fc00::ffff:ffff:ffff:ffe0/124")),
		rec("new", "c2", "n2", recorded("172.18.255.208/28")),
		// connected by an older meshctl: cluster k got block k+1 of every family
		existing,
		rec("old", "c1", "n1", nil),
		rec("old", "c2", "n2", nil),
		rec("one", "c1", "n1", nil), // one network: no pools
		rec("one", "c2", "n1", nil),
		rec("fresh", "c1", "n1", &model.Pools{}), // made by this meshctl, not connected yet
		rec("fresh", "c2", "n2", &model.Pools{}),
		rec("elsewhere", "c1", "n1", &model.Pools{DockerNetwork: "other", CIDRs: []string{"172.30.255.224/28"}}),
		rec("elsewhere", "c2", "n2", &model.Pools{DockerNetwork: "other", CIDRs: []string{"172.30.255.208/28"}}),
		{KindName: "stopped", Error: "container is not running"},
	}
	hs, unreadable := holders(all, "kind", prefixes("172.18.0.0/16", "fc00::/64"))
	var got []string
	for _, h := range hs {
		got = append(got, fmt.Sprintf("%s/%s %v %v", h.env, h.cluster, h.pools, h.inferred))
	}
	want := []string{
		"new/c1 [172.18.255.224/28 fc00::ffff:ffff:ffff:ffe0/124] false",
		"new/c2 [172.18.255.208/28] false",
		"old/c1 [172.18.255.208/28 fc00::ffff:ffff:ffff:ffd0/124] true", // block 2: a-cloud is cluster 1
		"old/c2 [172.18.255.192/28 fc00::ffff:ffff:ffff:ffc0/124] true",
	}
	if !slices.Equal(got, want) {
		t.Errorf("holders:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(unreadable) != 1 || !strings.Contains(unreadable[0], "stopped (container is not running)") {
		t.Errorf("unreadable %v", unreadable)
	}
}
