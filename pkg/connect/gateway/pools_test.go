package gateway

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestCarvePools(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		subnets []string
		n, size int
		want    [][]string
		wantErr string
	}{
		{name: "kind's default IPv4 network", subnets: []string{"172.18.0.0/16"}, n: 2, size: 16,
			want: [][]string{{"172.18.255.224/28"}, {"172.18.255.208/28"}}},
		{name: "IPv6 only", subnets: []string{"fc00:f853:ccd:e793::/64"}, n: 2, size: 16,
			want: [][]string{{"fc00:f853:ccd:e793:ffff:ffff:ffff:ffe0/124"}, {"fc00:f853:ccd:e793:ffff:ffff:ffff:ffd0/124"}}},
		{name: "dual stack: one pool per family", subnets: []string{"172.18.0.0/16", "fc00:f853:ccd:e793::/64"}, n: 1, size: 16,
			want: [][]string{{"172.18.255.224/28", "fc00:f853:ccd:e793:ffff:ffff:ffff:ffe0/124"}}},
		{name: "v6 listed first keeps docker's order", subnets: []string{"fc00::/64", "10.0.0.0/24"}, n: 1, size: 8,
			want: [][]string{{"fc00::ffff:ffff:ffff:fff0/125", "10.0.0.240/29"}}},
		{name: "only the first subnet of a family", subnets: []string{"172.18.0.0/16", "172.19.0.0/16"}, n: 1, size: 16,
			want: [][]string{{"172.18.255.224/28"}}},
		{name: "unmasked subnet", subnets: []string{"172.18.3.4/16"}, n: 1, size: 16,
			want: [][]string{{"172.18.255.224/28"}}},
		{name: "borrow across bytes", subnets: []string{"10.1.0.0/16"}, n: 16, size: 16,
			want: func() [][]string {
				w := make([][]string, 16)
				w[14] = []string{"10.1.255.0/28"}
				w[15] = []string{"10.1.254.240/28"}
				return w
			}()},
		{name: "exactly half of a /24", subnets: []string{"192.168.1.0/24"}, n: 7, size: 16,
			want: func() [][]string {
				w := make([][]string, 7)
				w[6] = []string{"192.168.1.128/28"}
				return w
			}()},
		{name: "too small: a /24 for 10 clusters", subnets: []string{"192.168.1.0/24"}, n: 10, size: 16,
			wantErr: `docker network "kind" subnet 192.168.1.0/24 is too small for 10 clusters`},
		{name: "too small: a /30", subnets: []string{"10.0.0.0/30"}, n: 1, size: 4, wantErr: "too small"},
		{name: "v6 too small", subnets: []string{"172.18.0.0/16", "fd00::/120"}, n: 10, size: 16,
			wantErr: "subnet fd00::/120 is too small"},
		{name: "no subnet", n: 1, size: 16, wantErr: `docker network "kind" has no subnet`},
		{name: "size not a power of two", subnets: []string{"172.18.0.0/16"}, n: 1, size: 10, wantErr: "power of two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := carvePools("kind", prefixes(tc.subnets...), tc.n, tc.size)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.n {
				t.Fatalf("got %d pools, want %d", len(got), tc.n)
			}
			for i, w := range tc.want {
				if w == nil {
					continue
				}
				if len(got[i]) != len(w) {
					t.Fatalf("cluster %d: got %v, want %v", i, got[i], w)
				}
				for j := range w {
					if got[i][j].String() != w[j] {
						t.Errorf("cluster %d pool %d = %s, want %s", i, j, got[i][j], w[j])
					}
				}
			}
		})
	}
}

// TestCarvePoolsDisjoint checks, for every count up to 10 clusters and on
// IPv4, IPv6 and dual-stack networks, that no two clusters share an address,
// that no pool reaches the bottom half of the subnet (docker's addresses),
// the top block or the IPv4 broadcast address, and that a cluster's pool
// does not move when clusters are added after it.
func TestCarvePoolsDisjoint(t *testing.T) {
	t.Parallel()
	for _, subnets := range [][]string{
		{"172.18.0.0/16"},
		{"fc00:f853:ccd:e793::/64"},
		{"172.18.0.0/16", "fc00:f853:ccd:e793::/64"},
		{"10.89.0.0/24", "fd00:1::/112"},
	} {
		nets := prefixes(subnets...)
		var prev [][]netip.Prefix
		for n := 1; n <= 10; n++ {
			size := 16
			if nets[0].Bits() == 24 {
				size = 8
			}
			pools, err := carvePools("kind", nets, n, size)
			if err != nil {
				t.Fatalf("%v, %d clusters: %v", subnets, n, err)
			}
			for i := range pools {
				if len(pools[i]) != len(nets) {
					t.Fatalf("%v: cluster %d got %v, want one pool per family", subnets, i, pools[i])
				}
				for j, p := range pools[i] {
					s := nets[j]
					if !s.Contains(p.Addr()) || !s.Contains(lastAddr(p)) {
						t.Errorf("%v: pool %s is outside %s", subnets, p, s)
					}
					if lastAddr(p) == lastAddr(s) {
						t.Errorf("%v: pool %s holds the subnet's last address", subnets, p)
					}
					half := netip.PrefixFrom(s.Addr(), s.Bits()+1)
					if half.Contains(p.Addr()) {
						t.Errorf("%v: pool %s reaches the bottom half %s", subnets, p, half)
					}
					for k := range i {
						if pools[k][j].Overlaps(p) {
							t.Errorf("%v: clusters %d and %d share addresses: %s, %s", subnets, k, i, pools[k][j], p)
						}
					}
					if i < len(prev) && prev[i][j] != p {
						t.Errorf("%v: cluster %d's pool moved from %s to %s when the %dth cluster came", subnets, i, prev[i][j], p, n)
					}
				}
			}
			prev = pools
		}
	}
}

func TestFamilyPools(t *testing.T) {
	t.Parallel()
	both := prefixes("172.18.255.224/28", "fc00::ffe0/124")
	for _, tc := range []struct {
		family  string
		pools   []netip.Prefix
		want    string
		wantErr string
	}{
		{cluster.IPv4, both, "[172.18.255.224/28]", ""},
		{"", both, "[172.18.255.224/28]", ""},
		{cluster.IPv6, both, "[fc00::ffe0/124]", ""},
		{cluster.Dual, both, "[172.18.255.224/28 fc00::ffe0/124]", ""},
		{cluster.Dual, both[:1], "[172.18.255.224/28]", ""},
		{cluster.IPv6, both[:1], "", `cluster c (ipv6): docker network "kind" has no subnet of its IP family`},
	} {
		got, err := familyPools(cluster.ClusterPlan{Name: "c", IPFamily: tc.family}, tc.pools, "kind")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.family, err, tc.wantErr)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("%s: got %v, %v; want %s", tc.family, got, err, tc.want)
		}
	}
}
