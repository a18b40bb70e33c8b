package e2e

import (
	"net/netip"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/connect"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// Dual stack on real kind: every node gets a pod CIDR of each family, and
// connect routes both, so pods and Services of one cluster are reached from
// the other over IPv4 and over IPv6.
var _ = Describe("dual-stack clusters", Ordered, func() {
	dsEnv := env + "-ds"
	var mesh *meshtest.Env

	BeforeAll(func(ctx SpecContext) {
		DeferCleanup(func() {
			if !keep() {
				_, _, _ = meshctlResult("down", "--env", dsEnv)
			}
		})
		var res cluster.UpResult
		meshctlJSON(&res, "up", "--env", dsEnv, "--clusters", "2", "--ip-family", "dual", "--image", suite.image,
			"--registry=false", "--install=false")
		Expect(res.Clusters).To(HaveLen(2))
		mesh = attach(ctx, dsEnv, meshtest.WithClusters(2))
	})

	It("gives every node a pod CIDR of each family and routes both to the other cluster", func() {
		var st cluster.StatusResult
		meshctlJSON(&st, "status", "--env", dsEnv)
		for _, c := range st.Clusters {
			for _, n := range c.Nodes {
				Expect(families(n.PodCIDRs)).To(ConsistOf("IPv4", "IPv6"), "node %s pod CIDRs %v", n.Name, n.PodCIDRs)
			}
		}
		var conn connect.Result
		meshctlJSON(&conn, "connect", "--env", dsEnv)
		for _, n := range conn.Nodes {
			// The peer's pod CIDR and service CIDR, each in both families.
			Expect(n.Routes).To(HaveLen(4), "node %s", n.Node)
		}
	})

	It("reaches pods and Services of the other cluster over IPv4 and IPv6", func(ctx SpecContext) {
		echo := mesh.DeployEcho(ctx, mesh.CreateNamespace(ctx, "dual-", nil), "echo")
		for _, pair := range [][2]string{{"cluster1", "cluster2"}, {"cluster2", "cluster1"}} {
			from, to := echo.In(pair[0]), echo.In(pair[1])
			targets := append(to.PodTargets(), to.ServiceTargets()...)
			var hosts []string
			for _, t := range targets {
				hosts = append(hosts, t.Host)
			}
			Expect(families(hosts)).To(ConsistOf("IPv4", "IPv4", "IPv6", "IPv6"), "%s: pod IPs %v, service IPs %v", to, to.PodIPs, to.ServiceIPs)
			for _, t := range targets {
				Eventually(from).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(t))
			}
		}
	})
})

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
