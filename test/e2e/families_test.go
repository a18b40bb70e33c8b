package e2e

import (
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/connect/routes"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// IPv6 on real kind, IPv6 only (dual stack is the lifecycle container's
// environment): every node gets a pod CIDR of each of the cluster's
// families, and connect routes them all, so pods and Services of one cluster
// are reached from another on its network in every family. IPv6 only runs
// on two networks (clusters 1 and 3 on network1, cluster2 on network2, as
// its topology says), which adds MetalLB in IPv6: each
// cluster's east-west gateway gets an IPv6 address from the kind network's
// IPv6 range (L2 mode answers neighbor solicitation as it answers ARP),
// reached from the other network. One environment serves both, where two
// took a cluster more to create. cluster3 is a remote of cluster1: the
// environment has the shape of Istio's primary-remote on two networks, and
// Istio's control plane specs run on it last (istioSpecs), where they had
// three clusters of their own.
var _ = Describe("clusters beyond IPv4 / IPv6 only, on two networks", Ordered, slow, func() {
	const ipFamily, clusters = "ipv6", 3
	want := []string{"IPv6"}
	famEnv := env + "-" + ipFamily
	var res struct {
		cluster.UpResult
		Gateways []gateway.ClusterResult `json:"gateways"`
	}
	var mesh *meshtest.Env
	var upArgs []string
	// peers are the pairs of clusters on one network, which connect routes
	// to each other.
	var peers [][2]string

	BeforeAll(func(ctx SpecContext) {
		requireMetalLBImages()
		DeferCleanup(func() {
			if !keep() {
				_, _, _ = meshctlResult("down", "--env", famEnv)
			}
		})
		topology := filepath.Join(GinkgoT().TempDir(), "topology.json")
		Expect(os.WriteFile(topology, []byte(`[
  {"kind": "Kubernetes", "clusterName": "cluster1", "network": "network1"},
  {"kind": "Kubernetes", "clusterName": "cluster2", "network": "network2"},
  {"kind": "Kubernetes", "clusterName": "cluster3", "network": "network1", "primaryClusterName": "cluster1"}
]`), 0o644)).To(Succeed())
		upArgs = []string{"up", "--env", famEnv, "--topology", topology, "--ip-family", ipFamily, "--image", suite.image, "--registry=false", "--install=false"}
		meshctlJSON(&res, upArgs...)
		Expect(res.Clusters).To(HaveLen(clusters))
		for i, a := range res.Clusters {
			for _, b := range res.Clusters[i+1:] {
				if a.Network == b.Network {
					peers = append(peers, [2]string{a.Name, b.Name}, [2]string{b.Name, a.Name})
				}
			}
		}
		Expect(peers).NotTo(BeEmpty(), "no two clusters share a network: %+v", res.Clusters)
		mesh = attach(ctx, famEnv, meshtest.WithTopology(topology))
	})

	It("gives every node a pod CIDR of each family and routes them all to the clusters on its network", func() {
		var st cluster.StatusResult
		meshctlJSON(&st, "status", "--env", famEnv)
		for _, c := range st.Clusters {
			for _, n := range c.Nodes {
				Expect(families(n.PodCIDRs)).To(ConsistOf(want), "node %s pod CIDRs %v", n.Name, n.PodCIDRs)
			}
		}
		// kind cluster (connect names those) -> clusters on its network
		// besides itself
		onNetwork := map[string]int{}
		for _, a := range res.Clusters {
			for _, b := range res.Clusters {
				if a.Name != b.Name && a.Network == b.Network {
					onNetwork[a.KindName]++
				}
			}
		}
		var conn routes.Result
		meshctlJSON(&conn, "connect", "--env", famEnv)
		for _, n := range conn.Nodes {
			// Each peer's pod CIDR and service CIDR, in each family; none
			// to a cluster on another network.
			Expect(n.Routes).To(HaveLen(2*len(want)*onNetwork[n.Cluster]), "node %s of %s", n.Node, n.Cluster)
		}
	})

	It("reaches pods and Services of the other cluster on its network in every family", func(ctx SpecContext) {
		echo := mesh.DeployEcho(ctx, mesh.CreateNamespace(ctx, "fam-", nil), "echo")
		for _, pair := range peers {
			from, to := echo.In(pair[0]), echo.In(pair[1])
			Expect(families(to.PodIPs)).To(ConsistOf(want), "%s: pod IPs", to)
			Expect(families(to.ServiceIPs)).To(ConsistOf(want), "%s: service IPs", to)
			for _, t := range append(to.PodTargets(), to.ServiceTargets()...) {
				Eventually(from).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(t))
			}
		}
	})

	It("gives each gateway an address of each family from its own pool, answering from the other network", func(ctx SpecContext) {
		Expect(res.Gateways).To(HaveLen(clusters))
		probes := mesh.DeployEcho(ctx, mesh.CreateNamespace(ctx, "gw-probe-", nil), "probe")
		for _, gw := range res.Gateways {
			Expect(families(gw.Pools)).To(ConsistOf(want), "%s pools", gw.Cluster)
			Expect(families(gw.Addresses)).To(ConsistOf(want), "%s addresses", gw.Cluster)
			fakeGateway(ctx, mesh.Cluster(gw.Cluster), gw.Network, "meshctl-gw-"+ipFamily+"-"+gw.Cluster)
		}
		for _, gw := range res.Gateways {
			// From the first cluster of another network.
			from := ""
			for _, c := range res.Clusters {
				if c.Network != gw.Network {
					from = c.Name
					break
				}
			}
			Expect(from).NotTo(BeEmpty(), "no cluster off %s's network", gw.Cluster)
			Eventually(probes.In(from)).WithTimeout(3 * time.Minute).WithPolling(3 * time.Second).
				Should(meshtest.Reach(gatewayTarget(famEnv, gw, "meshctl-gw-"+ipFamily+"-"+gw.Cluster)))
		}
	})

	// Istio's istiod reads the other clusters through these secrets: an
	// IPv6-only cluster's pods cannot resolve kind's node names (Docker's
	// DNS is forwarded from the IPv4 gateway only), so its secrets name
	// the API servers by address.
	It("gives each primary remote secrets whose API servers its pods reach", func(ctx SpecContext) {
		probes := mesh.DeployEcho(ctx, mesh.CreateNamespace(ctx, "rs-probe-", nil), "probe")
		Expect(mesh.Primaries()).To(HaveLen(2))
		for _, c := range mesh.Primaries() {
			secrets, err := c.Kube.CoreV1().Secrets("istio-system").List(ctx, metav1.ListOptions{LabelSelector: "istio/multiCluster=true"})
			Expect(err).NotTo(HaveOccurred(), c.Name)
			Expect(secrets.Items).NotTo(BeEmpty(), "%s has no remote secrets", c.Name)
			for _, s := range secrets.Items {
				for name, kc := range s.Data {
					cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
					Expect(err).NotTo(HaveOccurred(), "%s: %s/%s", c.Name, s.Name, name)
					u, err := url.Parse(cfg.Host)
					Expect(err).NotTo(HaveOccurred(), cfg.Host)
					port, err := strconv.Atoi(u.Port())
					Expect(err).NotTo(HaveOccurred(), cfg.Host)
					// The API server answers a plain HTTP request with a 400:
					// any answer proves the address resolves and connects.
					Eventually(probes.In(c.Name)).WithContext(ctx).WithTimeout(time.Minute).WithPolling(2*time.Second).
						Should(meshtest.Reach(meshtest.Address(u.Hostname(), port)), "%s's remote secret %s names %s", c.Name, s.Name, cfg.Host)
				}
			}
		}
	})

	istioSpecs(famEnv, func() []string { return slices.Clone(upArgs) }, func() *meshtest.Env { return mesh })
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
