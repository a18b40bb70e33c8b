package routes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/meshctl/meshctl/internal/parallel"
)

// Node is one node of a cluster: its address(es) on the shared network and
// the pod CIDRs Kubernetes gave it (spec.podCIDRs).
type Node struct {
	Name         string
	IPs          []netip.Addr
	PodCIDRs     []netip.Prefix
	ControlPlane bool
}

// Cluster is what routing needs to know of a cluster.
type Cluster struct {
	Name           string
	Network        string
	ServiceSubnets []netip.Prefix
	Nodes          []Node
}

// Route sends Dst via the next hop Via, the address of the peer node
// ViaNode (by which the route reconciler finds it again when it moves).
type Route struct {
	Dst     netip.Prefix
	Via     netip.Addr
	ViaNode string
}

func (r Route) String() string { return fmt.Sprintf("%s via %s", r.Dst, r.Via) }

// NodeRoutes are the routes one node needs.
type NodeRoutes struct {
	Cluster string
	Node    string
	Routes  []Route
}

// RoutePlan computes, for every node of every cluster, the routes to the
// other clusters on its network: each peer node's pod CIDRs via that node,
// and each peer service CIDR via the peer's control-plane node (kube-proxy
// there answers for every service). IPv4 CIDRs go via IPv4 addresses and
// IPv6 via IPv6. Istio's scripts route only control-plane nodes and only the
// first node's IPv4 pod CIDR; every node and every CIDR is routed here.
//
// It fails, naming the cluster and node, when a peer node has no pod CIDR
// yet or no address of a CIDR's family: a partial plan would leave pods
// unreachable in ways that are hard to see.
func RoutePlan(clusters []Cluster) ([]NodeRoutes, error) {
	var errs []error
	peerRoutes := map[string][]Route{} // cluster name → routes others need to reach it
	for _, c := range clusters {
		rs, err := routesTo(c)
		if err != nil {
			errs = append(errs, err)
		}
		peerRoutes[c.Name] = rs
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var plan []NodeRoutes
	for _, c := range clusters {
		var rs []Route
		for _, peer := range clusters {
			if peer.Name != c.Name && peer.Network == c.Network {
				rs = append(rs, peerRoutes[peer.Name]...)
			}
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].Dst.String() < rs[j].Dst.String() })
		for _, n := range c.Nodes {
			plan = append(plan, NodeRoutes{Cluster: c.Name, Node: n.Name, Routes: rs})
		}
	}
	return plan, nil
}

// routesTo lists the routes into cluster c from any peer.
func routesTo(c Cluster) ([]Route, error) {
	var rs []Route
	var cp *Node
	for i, n := range c.Nodes {
		if n.ControlPlane && cp == nil {
			cp = &c.Nodes[i]
		}
		if len(n.PodCIDRs) == 0 {
			return nil, fmt.Errorf("cluster %q: node %s has no podCIDR yet (is kube-controller-manager allocating node CIDRs?)", c.Name, n.Name)
		}
		for _, p := range n.PodCIDRs {
			via, ok := sameFamily(n.IPs, p)
			if !ok {
				return nil, fmt.Errorf("cluster %q: node %s has no %s address for pod CIDR %s", c.Name, n.Name, family(p), p)
			}
			rs = append(rs, Route{Dst: p, Via: via, ViaNode: n.Name})
		}
	}
	if len(c.ServiceSubnets) > 0 && cp == nil {
		return nil, fmt.Errorf("cluster %q: no control-plane node to route its service CIDRs through", c.Name)
	}
	for _, s := range c.ServiceSubnets {
		via, ok := sameFamily(cp.IPs, s)
		if !ok {
			return nil, fmt.Errorf("cluster %q: control-plane node %s has no %s address for service CIDR %s", c.Name, cp.Name, family(s), s)
		}
		rs = append(rs, Route{Dst: s, Via: via, ViaNode: cp.Name})
	}
	return rs, nil
}

func sameFamily(ips []netip.Addr, p netip.Prefix) (netip.Addr, bool) {
	for _, ip := range ips {
		if ip.Is4() == p.Addr().Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func family(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// Batch is the `ip -batch` input that installs routes. `route replace` makes
// it idempotent: running it again changes nothing, and a route whose next
// hop moved (a recreated peer) is corrected.
func Batch(rs []Route) []byte {
	var b bytes.Buffer
	for _, r := range rs {
		fmt.Fprintf(&b, "route replace %s via %s\n", r.Dst, r.Via)
	}
	return b.Bytes()
}

// Executor runs a command on a node with stdin. A kind node is one through
// `docker exec`; a network namespace through `ip netns exec` in tests.
type Executor interface {
	Exec(ctx context.Context, cluster, node string, stdin []byte, argv ...string) error
}

// Apply installs a route plan: one `ip -batch -` per node, all nodes at once.
// A node's routes go in as one batch, so a node has all of its routes or —
// when the batch fails — the error says which node and line.
func Apply(ctx context.Context, x Executor, plan []NodeRoutes) error {
	return parallel.ForEach(plan, func(nr NodeRoutes) error {
		if len(nr.Routes) == 0 {
			return nil
		}
		if err := x.Exec(ctx, nr.Cluster, nr.Node, Batch(nr.Routes), "ip", "-batch", "-"); err != nil {
			return fmt.Errorf("cluster %q: node %s: adding %d routes: %w", nr.Cluster, nr.Node, len(nr.Routes), err)
		}
		return nil
	})
}

// String renders a plan for people: one block per node.
func String(plan []NodeRoutes) string {
	var b strings.Builder
	for _, nr := range plan {
		fmt.Fprintf(&b, "%s/%s:\n", nr.Cluster, nr.Node)
		for _, r := range nr.Routes {
			fmt.Fprintf(&b, "  %s\n", r)
		}
	}
	return b.String()
}
