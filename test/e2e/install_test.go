package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/pkg/meshtest"
)

// installOutput is what `up -o json` and `install -o json` print.
type installOutput struct {
	Image        string   `json:"image"`
	ImageID      string   `json:"imageID"`
	ImageLoaded  []string `json:"imageLoaded"`
	ImagePresent []string `json:"imagePresent"`
	Clusters     []struct {
		Cluster  string `json:"cluster"`
		Error    string `json:"error"`
		Releases []struct {
			Name     string `json:"name"`
			Action   string `json:"action"`
			Revision int    `json:"revision"`
		} `json:"releases"`
	} `json:"clusters"`
}

// releaseActions flattens a report to cluster/release=action.
func releaseActions(r *installOutput) []string {
	var out []string
	for _, c := range r.Clusters {
		for _, rel := range c.Releases {
			out = append(out, c.Cluster+"/"+rel.Name+"="+rel.Action)
		}
	}
	return out
}

func allActions(r *installOutput, action string) []string {
	var out []string
	for _, c := range r.Clusters {
		for _, rel := range c.Releases {
			out = append(out, c.Cluster+"/"+rel.Name+"="+action)
		}
	}
	return out
}

// primaryConflist is the node's CNI config the runtime uses (kindnet's).
func primaryConflist(node string) string {
	GinkgoHelper()
	out, err := docker("exec", node, "sh", "-c", "ls /etc/cni/net.d/*.conflist | head -1 | xargs cat")
	Expect(err).NotTo(HaveOccurred(), out)
	return out
}

var _ = Describe("the dataplane install", Ordered, slow, func() {
	instEnv := env + "-inst"
	var mesh *meshtest.Env
	var first installOutput
	nodes := map[string][]string{}     // cluster -> node names
	imageDigest := map[string]string{} // node -> manifest digest of the side-loaded image
	allNodes := func() []string {
		var out []string
		for _, ns := range nodes {
			out = append(out, ns...)
		}
		return out
	}

	BeforeAll(func(ctx SpecContext) {
		// This container tests install, uninstall and the dataplane, not
		// up: meshtest makes the environment through pkg/mesh, the library
		// behind `meshctl up` (clusters, routes, remote secrets, the shared
		// root CA, the dataplane image built from the binary under test and
		// its charts), and deletes it at the end.
		mesh = meshtest.Setup(ctx,
			meshtest.WithEnv(instEnv), meshtest.WithClusters(2), meshtest.WithImage(suite.image),
			meshtest.WithArtifacts(suite.artifacts), meshtest.WithEchoImage(suite.testImage),
			meshtest.WithInstall(filepath.Join(filepath.Dir(suite.meshctl), "meshctl-dataplane")), meshtest.WithKeep(keep()))
		setCurrent(mesh)
		for _, c := range mesh.Clusters() {
			list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			for _, n := range list.Items {
				nodes[c.Name] = append(nodes[c.Name], n.Name)
			}
		}
	})

	It("installed the dataplane into both clusters as the CLI would: meshctl install finds nothing to change", func() {
		meshctlJSON(&first, "install", "--env", instEnv)
		Expect(first.Image).To(HavePrefix("meshctl/dataplane:"))
		Expect(releaseActions(&first)).To(HaveLen(4))
		Expect(releaseActions(&first)).To(ConsistOf(allActions(&first, "unchanged")))
		// The image is already in every node's containerd: nothing is sent.
		Expect(first.ImageLoaded).To(BeEmpty())
		Expect(first.ImagePresent).To(ConsistOf(allNodes()))
	})

	It("side-loaded the dataplane image into every node's containerd", func() {
		for _, ns := range nodes {
			for _, n := range ns {
				images := nodeImages(n)
				Expect(images).To(HaveKey("docker.io/"+first.Image), "node %s", n)
				imageDigest[n] = images["docker.io/"+first.Image]
			}
		}
	})

	It("runs the CNI and proxy DaemonSets Ready on every node, and the signer", func(ctx SpecContext) {
		mesh.ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
			for _, name := range []string{"meshctl-cni-node", "meshctl-proxy"} {
				ds, err := c.Kube.AppsV1().DaemonSets("istio-system").Get(ctx, name, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(ds.Status.DesiredNumberScheduled).To(BeEquivalentTo(len(nodes[c.Name])), name)
				g.Expect(ds.Status.NumberReady).To(Equal(ds.Status.DesiredNumberScheduled), "%s: %+v", name, ds.Status)
			}
			d, err := c.Kube.AppsV1().Deployments("istio-system").Get(ctx, "meshctl-signer", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Status.ReadyReplicas).To(BeEquivalentTo(1), "signer: %+v", d.Status)
		})
	})

	It("chained meshctl-cni into each node's CNI config and installed the plugin binary", func() {
		for _, ns := range nodes {
			for _, n := range ns {
				Eventually(func() string { return primaryConflist(n) }).WithTimeout(time.Minute).
					Should(ContainSubstring(`"type": "meshctl-cni"`), "node %s", n)
				out, err := docker("exec", n, "test", "-x", "/opt/cni/bin/meshctl-cni")
				Expect(err).NotTo(HaveOccurred(), "node %s: /opt/cni/bin/meshctl-cni: %s", n, out)
			}
		}
	})

	It("still starts ordinary (unmeshed) pods through the chained plugin", func(ctx SpecContext) {
		// DeployEcho waits for every cluster's pod to be Ready.
		echo := mesh.DeployEcho(ctx, mesh.CreateNamespace(ctx, "plain-", nil), "plain")
		Expect(echo).To(HaveLen(2))
	})

	meshtestSpecs(instEnv, func() *meshtest.Env { return mesh })

	It("rejects bad values before touching any cluster, naming the key or file", func() {
		_, errOut, err := meshctlResult("install", "--env", instEnv, "--set", "global.meshId=typo")
		Expect(err).To(HaveOccurred())
		Expect(errOut).To(ContainSubstring("meshId"))
		Expect(errOut).To(ContainSubstring(`cluster "cluster1"`))

		bad := filepath.Join(GinkgoT().TempDir(), "values.yaml")
		Expect(os.WriteFile(bad, []byte("global: [unclosed\n"), 0o644)).To(Succeed())
		_, errOut, err = meshctlResult("install", "--env", instEnv, "-f", bad)
		Expect(err).To(HaveOccurred())
		Expect(errOut).To(ContainSubstring(bad))
	})

	It("uninstall removes the releases, the CNI entry and the plugin binary", func(ctx SpecContext) {
		var res installOutput
		meshctlJSON(&res, "uninstall", "--env", instEnv)
		Expect(releaseActions(&res)).To(ConsistOf(allActions(&res, "uninstalled")))
		mesh.ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
			for _, name := range []string{"meshctl-cni-node", "meshctl-proxy"} {
				_, err := c.Kube.AppsV1().DaemonSets("istio-system").Get(ctx, name, metav1.GetOptions{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: %v", name, err)
			}
		})
		for _, ns := range nodes {
			for _, n := range ns {
				Eventually(func() string { return primaryConflist(n) }).WithTimeout(2*time.Minute).
					ShouldNot(ContainSubstring("meshctl-cni"), "node %s", n)
				Eventually(func() error {
					_, err := docker("exec", n, "test", "!", "-e", "/opt/cni/bin/meshctl-cni")
					return err
				}).WithTimeout(time.Minute).Should(Succeed(), "node %s still has /opt/cni/bin/meshctl-cni", n)
				// The image meshctl side-loaded is gone, under its name
				// and under the digest alias the import gave it, and
				// nothing else went with it (the node's own images stay).
				images := nodeImages(n)
				Expect(images).NotTo(HaveKey("docker.io/"+first.Image), "node %s", n)
				Expect(imageDigest[n]).NotTo(BeEmpty(), "node %s", n)
				for name, digest := range images {
					Expect(digest).NotTo(Equal(imageDigest[n]), "node %s still has the dataplane image as %s", n, name)
				}
				Expect(images).To(HaveKey(HavePrefix("registry.k8s.io/pause:")), "node %s", n)
			}
		}
	})

	It("installs again after an uninstall, side-loading the image again", func() {
		var res installOutput
		meshctlJSON(&res, "install", "--env", instEnv)
		Expect(releaseActions(&res)).To(ConsistOf(allActions(&res, "installed")))
		Expect(res.ImageID).To(Equal(first.ImageID))
		// uninstall took the image away: install finds it missing and
		// loads it again into every node
		Expect(res.ImagePresent).To(BeEmpty())
		Expect(res.ImageLoaded).To(ConsistOf(allNodes()))
		for _, ns := range nodes {
			for _, n := range ns {
				Expect(nodeImages(n)).To(HaveKeyWithValue("docker.io/"+first.Image, imageDigest[n]), "node %s", n)
			}
		}
	})

	// The goal of the dataplane: a pod in an ambient namespace starts
	// (the plugin asked the node agent, which redirected it and handed it
	// to the proxy) and its traffic to another meshed pod crosses the
	// proxies over HBONE.
	It("meshes pods of an ambient namespace and carries their traffic over HBONE", func(ctx SpecContext) {
		ns := mesh.CreateNamespace(ctx, "ambient-", map[string]string{"istio.io/dataplane-mode": "ambient"})
		client := mesh.DeployEcho(ctx, ns, "client").In("cluster1")
		server := mesh.DeployEcho(ctx, ns, "server").In("cluster1")
		proxy := proxyOf(ctx, client)
		before := hboneOpened(ctx, proxy)
		Eventually(client).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(server.PodTarget()))
		Expect(hboneOpened(ctx, proxy)["outbound"]).To(BeNumerically(">", before["outbound"]),
			"the proxy on %s's node opened no outbound HBONE tunnel", client)
	})

	agentPodDeletedSpecs(func() *meshtest.Env { return mesh })

	// Across clusters on one network: connect routes the peer's pod CIDR,
	// the proxies' --mesh-cidrs hold both clusters' pod CIDRs, and the
	// workload certificates of both chain to the environment's one root.
	It("carries traffic between ambient pods of two clusters over HBONE, through both proxies", func(ctx SpecContext) {
		ns := mesh.CreateNamespace(ctx, "ambient-x-", map[string]string{"istio.io/dataplane-mode": "ambient"})
		echo := mesh.DeployEcho(ctx, ns, "echo")
		from, to := echo.In("cluster1"), echo.In("cluster2")
		clientProxy, serverProxy := proxyOf(ctx, from), proxyOf(ctx, to)
		clientBefore, serverBefore := hboneOpened(ctx, clientProxy), hboneOpened(ctx, serverProxy)
		Eventually(from).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(to.PodTarget()))
		Expect(hboneOpened(ctx, clientProxy)["outbound"]).To(BeNumerically(">", clientBefore["outbound"]),
			"%s: the client's proxy opened no outbound HBONE tunnel", clientProxy)
		Expect(hboneOpened(ctx, serverProxy)["inbound"]).To(BeNumerically(">", serverBefore["inbound"]),
			"%s: the server's proxy accepted no inbound HBONE tunnel", serverProxy)
		// And back.
		Eventually(to).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(from.PodTarget()))
	})

	meshedServiceSpecs(func() *meshtest.Env { return mesh })

	// What `down --uninstall-only` leaves is the clusters as they were
	// before meshctl installed anything: the ambient specs then install
	// Istio on them with `up`, which also shows their records stayed.
	It("down --uninstall-only removes the charts, meshctl's objects and the image, and keeps the clusters", func(ctx SpecContext) {
		var res struct {
			Deleted     []string `json:"deleted"`
			Uninstalled []struct {
				Cluster string   `json:"cluster"`
				Objects []string `json:"objects"`
			} `json:"uninstalled"`
		}
		meshctlJSON(&res, "down", "--env", instEnv, "--uninstall-only")
		Expect(res.Deleted).To(BeEmpty())
		Expect(res.Uninstalled).To(HaveLen(2))
		for _, u := range res.Uninstalled {
			Expect(u.Objects).To(ContainElement("secrets/istio-system/cacerts"), "cluster %s", u.Cluster)
		}
		mesh.ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
			for _, name := range []string{"meshctl-cni-node", "meshctl-proxy"} {
				_, err := c.Kube.AppsV1().DaemonSets("istio-system").Get(ctx, name, metav1.GetOptions{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: %v", name, err)
			}
			_, err := c.Kube.CoreV1().Secrets("istio-system").Get(ctx, "cacerts", metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "cacerts: %v", err)
			// The cluster itself is still there and answers.
			list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).NotTo(BeEmpty())
		})
		for _, n := range allNodes() {
			Expect(nodeImages(n)).NotTo(HaveKey("docker.io/"+first.Image), "node %s", n)
		}
	})

	// On what uninstall-only left: Istio's ambient mode, meshctl's proxy as
	// ztunnel.
	ambientSpecs(instEnv, func() *meshtest.Env { return mesh })
})

// nodeImages lists the images in a kind node's containerd (the CRI's
// namespace), name → manifest digest.
func nodeImages(node string) map[string]string {
	GinkgoHelper()
	out, err := docker("exec", node, "ctr", "--namespace=k8s.io", "images", "ls")
	Expect(err).NotTo(HaveOccurred(), out)
	images := map[string]string{}
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); i > 0 && len(f) >= 3 {
			images[f[0]] = f[2]
		}
	}
	return images
}

// nodeProxy is the meshctl-proxy pod on one node.
type nodeProxy struct {
	cluster *meshtest.Cluster
	pod     string
}

func (p nodeProxy) String() string { return p.cluster.Name + "/istio-system/" + p.pod }

// proxyOf finds the node proxy that serves an echo pod: the one on its node.
func proxyOf(ctx context.Context, e *meshtest.Echo) nodeProxy {
	GinkgoHelper()
	pod, err := e.Cluster.Kube.CoreV1().Pods(e.Namespace).Get(ctx, e.Pod, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	proxies, err := e.Cluster.Kube.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=meshctl-proxy", FieldSelector: "spec.nodeName=" + pod.Spec.NodeName})
	Expect(err).NotTo(HaveOccurred())
	Expect(proxies.Items).To(HaveLen(1), "meshctl-proxy pods on node %s", pod.Spec.NodeName)
	return nodeProxy{cluster: e.Cluster, pod: proxies.Items[0].Name}
}

var openedMetric = regexp.MustCompile(`(?m)^meshctl_hbone_connections_opened_total\{direction="([a-z_]+)"\} (\S+)$`)

// hboneOpened reads a proxy's meshctl_hbone_connections_opened_total by
// direction from its metrics port (15020), through the API server's pod
// proxy: no port-forward, no shell in the proxy's image.
func hboneOpened(ctx context.Context, p nodeProxy) map[string]float64 {
	GinkgoHelper()
	raw, err := p.cluster.Kube.CoreV1().Pods("istio-system").ProxyGet("http", p.pod, "15020", "/metrics", nil).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred(), "metrics of %s", p)
	out := map[string]float64{}
	for _, m := range openedMetric.FindAllStringSubmatch(string(raw), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		Expect(err).NotTo(HaveOccurred(), "metrics of %s: %s", p, m[0])
		out[m[1]] = v
	}
	GinkgoWriter.Printf("%s: meshctl_hbone_connections_opened_total %v\n", p, out)
	return out
}
