package e2e

import (
	"net/netip"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/connect/routes"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// IPv6 on real kind, dual stack and IPv6 only: every node gets a pod CIDR of
// each of the cluster's families, and connect routes them all, so pods and
// Services of one cluster are reached from the other in every family.
var _ = DescribeTableSubtree("clusters beyond IPv4", func(ipFamily string, want []string) {
	famEnv := env + "-" + ipFamily
	var mesh *meshtest.Env

	BeforeAll(func(ctx SpecContext) {
		DeferCleanup(func() {
			if !keep() {
				_, _, _ = meshctlResult("down", "--env", famEnv)
			}
		})
		var res cluster.UpResult
		meshctlJSON(&res, "up", "--env", famEnv, "--clusters", "2", "--ip-family", ipFamily, "--image", suite.image,
			"--registry=false", "--install=false")
		Expect(res.Clusters).To(HaveLen(2))
		mesh = attach(ctx, famEnv, meshtest.WithClusters(2))
	})

	It("gives every node a pod CIDR of each family and routes them all to the other cluster", func() {
		var st cluster.StatusResult
		meshctlJSON(&st, "status", "--env", famEnv)
		for _, c := range st.Clusters {
			for _, n := range c.Nodes {
				Expect(families(n.PodCIDRs)).To(ConsistOf(want), "node %s pod CIDRs %v", n.Name, n.PodCIDRs)
			}
		}
		var conn routes.Result
		meshctlJSON(&conn, "connect", "--env", famEnv)
		for _, n := range conn.Nodes {
			// The peer's pod CIDR and service CIDR, in each family.
			Expect(n.Routes).To(HaveLen(2*len(want)), "node %s", n.Node)
		}
	})

	It("reaches pods and Services of the other cluster in every family", func(ctx SpecContext) {
		echo := mesh.DeployEcho(ctx, mesh.CreateNamespace(ctx, "fam-", nil), "echo")
		for _, pair := range [][2]string{{"cluster1", "cluster2"}, {"cluster2", "cluster1"}} {
			from, to := echo.In(pair[0]), echo.In(pair[1])
			Expect(families(to.PodIPs)).To(ConsistOf(want), "%s: pod IPs", to)
			Expect(families(to.ServiceIPs)).To(ConsistOf(want), "%s: service IPs", to)
			for _, t := range append(to.PodTargets(), to.ServiceTargets()...) {
				Eventually(from).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(t))
			}
		}
	})
},
	Entry("dual stack", Ordered, "dual", []string{"IPv4", "IPv6"}),
	Entry("IPv6 only", Ordered, "ipv6", []string{"IPv6"}),
)

// families names the IP family of each address or prefix.
func families(addrs []string) []string {
	GinkgoHelper()
	var out []string
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			ip, err := netip.ParseAddr(a)
			Expect(err).NotTo(HaveOccurred(), "address %q", a)
			p = netip.PrefixFrom(ip, ip.BitLen())
		}
		out = append(out, map[bool]string{true: "IPv4", false: "IPv6"}[p.Addr().Is4()])
	}
	return out
}

// IPv6 only, on two networks: MetalLB gives each cluster's east-west gateway
// an IPv6 address from the kind network's IPv6 range (L2 mode answers
// neighbor solicitation as it answers ARP), reached from the other network.
var _ = Describe("IPv6-only clusters on two networks", Ordered, slow, func() {
	v6Env := env + "-ipv6mn"
	var res struct {
		cluster.UpResult
		Gateways []gateway.ClusterResult `json:"gateways"`
	}
	var mesh *meshtest.Env

	BeforeAll(func(ctx SpecContext) {
		requireMetalLBImages()
		DeferCleanup(func() {
			if !keep() {
				_, _, _ = meshctlResult("down", "--env", v6Env)
			}
		})
		meshctlJSON(&res, "up", "--env", v6Env, "--clusters", "2", "--networks", "2", "--ip-family", "ipv6",
			"--image", suite.image, "--registry=false", "--install=false")
		mesh = attach(ctx, v6Env, meshtest.WithClusters(2), meshtest.WithNetworks(2))
	})

	It("gives each gateway an IPv6 address from its own pool, answering from the other network", func(ctx SpecContext) {
		Expect(res.Gateways).To(HaveLen(2))
		probes := mesh.DeployEcho(ctx, mesh.CreateNamespace(ctx, "gw-probe-", nil), "probe")
		for i, gw := range res.Gateways {
			Expect(families(gw.Pools)).To(ConsistOf("IPv6"), "%s pools", gw.Cluster)
			Expect(families(gw.Addresses)).To(ConsistOf("IPv6"), "%s addresses", gw.Cluster)
			fakeGateway(ctx, mesh.Cluster(gw.Cluster), gw.Network, "meshctl-gw-v6-"+gw.Cluster)
			Eventually(probes.In(res.Gateways[1-i].Cluster)).WithTimeout(3 * time.Minute).WithPolling(3 * time.Second).
				Should(meshtest.Reach(gatewayTarget(v6Env, gw, "meshctl-gw-v6-"+gw.Cluster)))
		}
	})
})
