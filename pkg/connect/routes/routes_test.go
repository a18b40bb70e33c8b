package routes

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// fromPlan models the clusters of a meshctl plan as kind would make them:
// every node with an address on the kind network (v4 and/or v6, as the
// cluster's family) and one pod CIDR per family carved from the cluster's
// pod subnets, as kube-controller-manager does.
func fromPlan(t *testing.T, p *model.Plan) []Cluster {
	t.Helper()
	var out []Cluster
	for ci, c := range p.Clusters {
		if c.Existing {
			continue // never routed, as FromStatus leaves them out
		}
		cl := Cluster{Name: c.Name, Network: c.Network}
		for _, s := range c.ServiceSubnets {
			cl.ServiceSubnets = append(cl.ServiceSubnets, netip.MustParsePrefix(s))
		}
		for ni := 0; ni < c.ControlPlanes+c.Workers; ni++ {
			n := Node{Name: fmt.Sprintf("%s-node%d", c.KindName, ni), ControlPlane: ni == 0}
			for _, s := range c.PodSubnets {
				sub := netip.MustParsePrefix(s)
				bits := 24
				ip := sub.Addr().As16()
				if sub.Addr().Is4() {
					ip4 := sub.Addr().As4()
					ip4[2] = byte(ni)
					n.PodCIDRs = append(n.PodCIDRs, netip.PrefixFrom(netip.AddrFrom4(ip4), bits))
					n.IPs = append(n.IPs, netip.AddrFrom4([4]byte{172, 18, byte(ci), byte(ni + 2)}))
				} else {
					ip[7] = byte(ni)
					n.PodCIDRs = append(n.PodCIDRs, netip.PrefixFrom(netip.AddrFrom16(ip), 64))
					n.IPs = append(n.IPs, netip.MustParseAddr(fmt.Sprintf("fc00:f853:ccd:e793::%d:%d", ci, ni+2)))
				}
			}
			cl.Nodes = append(cl.Nodes, n)
		}
		out = append(out, cl)
	}
	return out
}

func TestRoutePlanEveryTopology(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../../testdata/topology/valid-*")
	if len(files) == 0 {
		t.Fatal("no topology fixtures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			specs, err := model.LoadTopology(f)
			if err != nil {
				t.Fatal(err)
			}
			for i := range specs {
				two := 2
				if specs[i].Kubeconfig == "" { // existing clusters have theirs
					specs[i].Workers = &two
				}
			}
			p, err := model.NewPlan(model.Request{Specs: specs})
			if err != nil {
				t.Fatal(err)
			}
			clusters := fromPlan(t, p)
			plan, err := RoutePlan(clusters)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, clusters, plan)
		})
	}
}

// checkPlan verifies a plan against its definition, independently of how
// RoutePlan computes it: a node has exactly one route per pod CIDR of every
// node, and per service CIDR, of every other cluster on its network — each
// via an address of the right family — and nothing else.
func checkPlan(t *testing.T, clusters []Cluster, plan []NodeRoutes) {
	t.Helper()
	byName := map[string]Cluster{}
	nodes := 0
	for _, c := range clusters {
		byName[c.Name] = c
		nodes += len(c.Nodes)
	}
	if len(plan) != nodes {
		t.Fatalf("plan covers %d nodes, want every one of %d", len(plan), nodes)
	}
	for _, nr := range plan {
		self := byName[nr.Cluster]
		want := map[netip.Prefix]netip.Addr{}
		for _, peer := range clusters {
			if peer.Name == self.Name || peer.Network != self.Network {
				continue
			}
			for _, n := range peer.Nodes {
				for _, p := range n.PodCIDRs {
					want[p] = pick(n.IPs, p.Addr().Is4())
				}
			}
			for _, s := range peer.ServiceSubnets {
				want[s] = pick(peer.Nodes[0].IPs, s.Addr().Is4())
			}
		}
		if len(nr.Routes) != len(want) {
			t.Errorf("%s/%s: %d routes, want %d:\n%s", nr.Cluster, nr.Node, len(nr.Routes), len(want), String([]NodeRoutes{nr}))
		}
		for _, r := range nr.Routes {
			if via, ok := want[r.Dst]; !ok || via != r.Via {
				t.Errorf("%s/%s: unexpected route %s (want via %v)", nr.Cluster, nr.Node, r, via)
			}
			if r.Dst.Addr().Is4() != r.Via.Is4() {
				t.Errorf("%s/%s: route %s mixes families", nr.Cluster, nr.Node, r)
			}
		}
	}
}

func pick(ips []netip.Addr, v4 bool) netip.Addr {
	for _, ip := range ips {
		if ip.Is4() == v4 {
			return ip
		}
	}
	return netip.Addr{}
}

func TestRoutePlanDualStackEveryNode(t *testing.T) {
	t.Parallel()
	p, err := model.NewPlan(model.Request{Clusters: 3, Networks: 2, Workers: 1, IPFamily: model.Dual})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := RoutePlan(fromPlan(t, p))
	if err != nil {
		t.Fatal(err)
	}
	// cluster1 and cluster3 share network-1; cluster2 is alone on network-2.
	got := String(plan)
	for _, want := range []string{
		"cluster1/cluster1-node1:\n  10.255.30.0/24 via 172.18.2.2\n",
		"  10.30.1.0/24 via 172.18.2.3\n",
		"  fd00:10:30:1::/64 via fc00:f853:ccd:e793::2:3\n",
		"  fd00:10:255:30::/112 via fc00:f853:ccd:e793::2:2\n",
		"cluster2/cluster2-node0:\ncluster2/cluster2-node1:\ncluster3",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "10.20.") {
		t.Errorf("routes into another network's cluster:\n%s", got)
	}
}

func TestRoutePlanErrors(t *testing.T) {
	t.Parallel()
	v4 := netip.MustParseAddr("172.18.0.2")
	tests := []struct {
		name     string
		clusters []Cluster
		want     string
	}{
		{"no podCIDR yet", []Cluster{{Name: "c1", Network: "n", Nodes: []Node{{Name: "w1", IPs: []netip.Addr{v4}}}}}, `cluster "c1": node w1 has no podCIDR yet`},
		{"no v6 address", []Cluster{{Name: "c1", Network: "n", Nodes: []Node{{Name: "w1", IPs: []netip.Addr{v4}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00:10:10::/64")}}}}}, `cluster "c1": node w1 has no IPv6 address for pod CIDR fd00:10:10::/64`},
		{"no control plane", []Cluster{{Name: "c1", Network: "n", ServiceSubnets: []netip.Prefix{netip.MustParsePrefix("10.255.10.0/24")}, Nodes: []Node{{Name: "w1", IPs: []netip.Addr{v4}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.10.0.0/24")}}}}}, `cluster "c1": no control-plane node`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := RoutePlan(tt.clusters); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestBatch(t *testing.T) {
	t.Parallel()
	got := string(Batch([]Route{
		{Dst: netip.MustParsePrefix("10.20.0.0/24"), Via: netip.MustParseAddr("172.18.0.3")},
		{Dst: netip.MustParsePrefix("fd00:10:20::/64"), Via: netip.MustParseAddr("fc00::3")},
	}))
	want := "route replace 10.20.0.0/24 via 172.18.0.3\nroute replace fd00:10:20::/64 via fc00::3\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
