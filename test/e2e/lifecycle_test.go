package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/connect/remotesecret"
	"github.com/meshctl/meshctl/pkg/connect/routes"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// The lifecycle of a dual-stack environment (IPv4 first, as kind's dual
// stack is): every node gets a pod CIDR of each family and connect routes
// both, so the specs of routes and connectivity cover both families where a
// container of its own took two clusters more to create (IPv6 only runs in
// families_test.go).
var _ = Describe("the cluster lifecycle", Ordered, slow, func() {
	var upArgs []string
	var res struct {
		cluster.UpResult
		RemoteSecrets *remotesecret.Result `json:"remoteSecrets"`
	}
	var mesh *meshtest.Env

	BeforeAll(func(ctx SpecContext) {
		upArgs = []string{"up", "--env", env, "--clusters", "2", "--ip-family", "dual", "--image", suite.image,
			"--registry-image", suite.registryImage, "--registry-name", registryName, "--registry-port", registryPort, "--install=false"}
		DeferCleanup(func() {
			if keep() {
				return
			}
			// Whatever happened, leave nothing behind.
			_, _, _ = meshctlResult("down", "--env", env, "--registry", "--registry-name", registryName)
		})
		meshctlJSON(&res, upArgs...)
		mesh = attach(ctx, env, meshtest.WithClusters(2))
	})

	It("creates two clusters in parallel, with a registry", func() {
		Expect(res.Clusters).To(HaveLen(2))
		for _, c := range res.Clusters {
			Expect(c.Action).To(Equal(cluster.ActionCreated))
			Expect(c.KindName).To(Equal(env + "-" + c.Name))
		}
		Expect(res.Registry).NotTo(BeNil())
	})

	It("installs one root CA and a distinct intermediate in every cluster", func(ctx SpecContext) {
		var roots, intermediates []string
		for _, c := range mesh.Clusters() {
			sec, err := c.Kube.CoreV1().Secrets("istio-system").Get(ctx, "cacerts", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), c.Name)
			Expect(sec.Data).To(HaveKey("ca-key.pem"))
			Expect(sec.Data).To(HaveKey("cert-chain.pem"))
			roots = append(roots, string(sec.Data["root-cert.pem"]))
			intermediates = append(intermediates, string(sec.Data["ca-cert.pem"]))
		}
		Expect(roots[0]).To(HavePrefix("-----BEGIN CERTIFICATE-----"))
		Expect(roots[1]).To(Equal(roots[0]))
		Expect(intermediates[1]).NotTo(Equal(intermediates[0]))
	})

	It("reports every node Ready, with pod CIDRs of each family from the plan", func() {
		// up ends when status calls the environment Ready: its nodes and
		// their kube-system pods (CoreDNS, kindnet, kube-proxy), no wait.
		var st cluster.StatusResult
		meshctlJSON(&st, "status", "--env", env, "--registry-name", registryName)
		Expect(st.Ready).To(BeTrue(), "status right after up: %+v", st)
		Expect(st.Registry).NotTo(BeNil())
		Expect(st.Registry.Running).To(BeTrue())
		for i, c := range st.Clusters {
			Expect(c.PodSubnets).To(HaveLen(2), "cluster %s", c.Name)
			Expect(c.PodSubnets[0]).To(Equal(fmt.Sprintf("10.%d.0.0/16", 10*(i+1))))
			Expect(families(c.PodSubnets)).To(Equal([]string{"IPv4", "IPv6"}), "cluster %s pod subnets %v", c.Name, c.PodSubnets)
			for _, n := range c.Nodes {
				Expect(families(n.PodCIDRs)).To(ConsistOf("IPv4", "IPv6"), "node %s pod CIDRs %v", n.Name, n.PodCIDRs)
				Expect(n.PodCIDRs[0]).To(HavePrefix(fmt.Sprintf("10.%d.", 10*(i+1))))
			}
		}
	})

	It("gives every cluster ECDSA P-256 keys: its CA and the kubeconfig's client certificate", func() {
		for _, c := range res.Clusters {
			kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
			Expect(err).NotTo(HaveOccurred(), c.Name)
			kctx := kc.Contexts[kc.CurrentContext]
			Expect(kctx).NotTo(BeNil(), "%s: no current context", c.Name)
			pems := map[string][]byte{
				"CA":                 kc.Clusters[kctx.Cluster].CertificateAuthorityData,
				"client certificate": kc.AuthInfos[kctx.AuthInfo].ClientCertificateData,
			}
			for what, data := range pems {
				block, _ := pem.Decode(data)
				Expect(block).NotTo(BeNil(), "%s: %s is not PEM", c.Name, what)
				cert, err := x509.ParseCertificate(block.Bytes)
				Expect(err).NotTo(HaveOccurred(), "%s: %s", c.Name, what)
				Expect(cert.PublicKeyAlgorithm).To(Equal(x509.ECDSA), "%s: %s key", c.Name, what)
				Expect(cert.PublicKey.(*ecdsa.PublicKey).Curve).To(Equal(elliptic.P256()), "%s: %s curve", c.Name, what)
			}
		}
	})

	It("starts each node without avoidable work: images unpacked in the node image, the controller manager unthrottled, no self-signed serving certificates, etcd's gRPC apart from HTTP, the kubelet started once", func() {
		for _, c := range res.Clusters {
			node := c.KindName + "-control-plane"
			// the node image carries its preloaded images unpacked
			// (hack/e2e/build-images.sh); containerd says so at boot
			// for each one it would have to unpack first
			out, err := docker("exec", node, "journalctl", "-u", "containerd", "--no-pager", "-o", "cat")
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(ContainSubstring("Start recovering state"), "%s: containerd's boot is not in its journal", node)
			Expect(out).NotTo(ContainSubstring("is not unpacked"), node)
			out, err = docker("exec", node, "cat", "/etc/kubernetes/manifests/kube-controller-manager.yaml")
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(ContainSubstring("--kube-api-qps=200"), node)
			Expect(out).To(ContainSubstring("--kube-api-burst=400"), node)
			// the controller manager and the scheduler serve with the API
			// server's certificate (no self-signed RSA keys at start): it
			// verifies against the cluster CA; etcd serves its HTTP
			// endpoints apart from gRPC (pkg/cluster/model/kindconfig.go)
			for _, port := range []string{"10257", "10259"} {
				out, err = docker("exec", node, "curl", "-sS", "--cacert", "/etc/kubernetes/pki/ca.crt", "https://localhost:"+port+"/healthz")
				Expect(err).NotTo(HaveOccurred(), "%s: port %s: %s", node, port, out)
				Expect(out).To(Equal("ok"), "%s: port %s", node, port)
			}
			out, err = docker("exec", node, "cat", "/etc/kubernetes/manifests/etcd.yaml")
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(ContainSubstring("--listen-client-http-urls=https://127.0.0.1:2382"), node)
			out, err = docker("exec", node, "journalctl", "-u", "kubelet", "--no-pager", "-o", "cat")
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(strings.Count(out, "Started kubelet.service")).To(Equal(1), "%s: kubelet starts:\n%s", node, out)
		}
	})

	It("runs CoreDNS in each cluster, seen through the host kubeconfig", func(ctx SpecContext) {
		Eventually(func(g Gomega) {
			for _, c := range mesh.Clusters() {
				pods, err := c.Kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pods.Items).NotTo(BeEmpty(), c.Name)
				for _, p := range pods.Items {
					g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "%s/%s", c.Name, p.Name)
				}
			}
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	})

	It("routes pods and services between the clusters of one network, in each family", func(ctx SpecContext) {
		var conn routes.Result
		meshctlJSON(&conn, "connect", "--env", env)
		Expect(conn.Nodes).To(HaveLen(2))
		for _, n := range conn.Nodes {
			Expect(n.Routes).To(HaveLen(4), "node %s: a pod CIDR and a service CIDR of the peer in each family", n.Node)
		}
		// A pod in each cluster (it runs: the nodes start pods), answering
		// with its cluster's and its own name, at an address of each family.
		echo := mesh.DeployEcho(ctx, mesh.CreateNamespace(ctx, "routes-", nil), "echo")
		for _, pair := range [][2]string{{"cluster1", "cluster2"}, {"cluster2", "cluster1"}} {
			from, to := echo.In(pair[0]), echo.In(pair[1])
			Expect(families(to.PodIPs)).To(ConsistOf("IPv4", "IPv6"), "%s: pod IPs", to)
			Expect(families(to.ServiceIPs)).To(ConsistOf("IPv4", "IPv6"), "%s: service IPs", to)
			for _, t := range append(to.PodTargets(), to.ServiceTargets()...) {
				Eventually(from).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(t))
			}
		}
		Expect(echo.In("cluster2").ServiceIP).To(HavePrefix("10.255.20."), "cluster2's service CIDR, IPv4 first")
	})

	It("prints kubeconfigs whose internal address works from another cluster's node", func() {
		kc := meshctl("kubeconfig", "--env", env, "--internal", "cluster1")
		Expect(kc).To(ContainSubstring("current-context: cluster1"))
		cfg, err := clientcmd.Load([]byte(kc))
		Expect(err).NotTo(HaveOccurred())
		Expect(cfg.Clusters["cluster1"].Server).To(MatchRegexp(`^https://\d+\.\d+\.\d+\.\d+:6443$`))
		// From inside cluster2's control-plane container, on the kind
		// network: how one cluster's control plane reaches another's API.
		node := env + "-cluster2-control-plane"
		out, err := dockerStdin(kc, "exec", "-i", node, "sh", "-c", "cat > /tmp/cluster1.kubeconfig")
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = docker("exec", node, "kubectl", "--kubeconfig", "/tmp/cluster1.kubeconfig", "get", "nodes", "-o", "name")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("node/" + env + "-cluster1-control-plane"))
		host := meshctl("kubeconfig", "--env", env, "cluster2")
		Expect(host).To(ContainSubstring("server: https://127.0.0.1:"))
	})

	It("pulls an image pushed to the local registry", func(ctx SpecContext) {
		ref := "localhost:" + registryPort + "/meshctl-e2e/busybox:e2e"
		out, err := docker("tag", suite.testImage, ref)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() error {
			out, err = docker("push", ref)
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		}).WithTimeout(time.Minute).Should(Succeed())
		mesh.ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
			cm, err := c.Kube.CoreV1().ConfigMaps("kube-public").Get(ctx, "local-registry-hosting", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cm.Data["localRegistryHosting.v1"]).To(ContainSubstring("localhost:" + registryPort))
		})
		// An echo of the pushed image, pulled by every node from the
		// registry. Not the pod's status.image: the CRI reports the name
		// the node already had for the same image (meshctl/busybox).
		pulled := reuse(ctx, env, meshtest.WithEchoImage(ref))
		echo := pulled.DeployEcho(ctx, pulled.CreateNamespace(ctx, "registry-", nil), "from-registry")
		for _, e := range echo {
			// Events are written asynchronously: the pod may be Ready first.
			Eventually(func(g Gomega) {
				events, err := e.Cluster.Kube.CoreV1().Events(e.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + e.Pod})
				g.Expect(err).NotTo(HaveOccurred())
				var msgs []string
				for _, ev := range events.Items {
					msgs = append(msgs, ev.Message)
				}
				g.Expect(msgs).To(ContainElement(HavePrefix(`Successfully pulled image "`+ref+`"`)), e.String())
			}).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
		}
	})

	// Remote secrets and the connectivity check, on this environment.
	connectSpecs(env, func() *remotesecret.Result { return res.RemoteSecrets }, func() *meshtest.Env { return mesh })

	It("reuses the environment when up runs again", func() {
		var again cluster.UpResult
		meshctlJSON(&again, upArgs...)
		for _, c := range again.Clusters {
			Expect(c.Action).To(Equal(cluster.ActionReused), c.Name)
		}
		Expect(again.Registry.Action).To(Equal(cluster.ActionReused))
		_, errOut, err := meshctlResult(append(upArgs, "--workers", "1")...)
		Expect(err).To(HaveOccurred())
		Expect(errOut).To(ContainSubstring("workers: 0 → 1"))
	})

	// The faults on this environment: stopped nodes, moved nodes.
	faultSpecs(env, func() []string { return upArgs })

	It("lists the environment", func() {
		var all []cluster.Listed
		meshctlJSON(&all, "list")
		var ours []string
		for _, e := range all {
			if e.Env() == env {
				ours = append(ours, e.Record.Cluster.Name)
			}
		}
		Expect(ours).To(ConsistOf("cluster1", "cluster2"))
	})

	It("leaves no container, network or kubeconfig behind after down", func() {
		current = nil // nothing left to collect artifacts from
		var down cluster.DownResult
		meshctlJSON(&down, "down", "--env", env, "--registry", "--registry-name", registryName)
		Expect(down.Deleted).To(ConsistOf(env+"-cluster1", env+"-cluster2"))
		out, err := docker("ps", "-a", "--filter", "label=io.x-k8s.kind.cluster", "--format", "{{.Names}}")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).NotTo(ContainSubstring(env + "-cluster"))
		out, _ = docker("ps", "-a", "--filter", "name=^"+registryName+"$", "--format", "{{.Names}}")
		Expect(strings.TrimSpace(out)).To(BeEmpty())
		// Other processes of the suite may be creating clusters: under the
		// kind network's guard (as a down takes it), none is, and with no
		// kind container left the network must be gone.
		release := guardKindNetwork()
		if strings.TrimSpace(func() string { o, _ := docker("ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster"); return o }()) == "" {
			out, _ = docker("network", "ls", "--filter", "name=^kind$", "--format", "{{.Name}}")
			Expect(strings.TrimSpace(out)).To(BeEmpty(), "the kind network outlived the last cluster")
		}
		release()
		for _, c := range res.Clusters {
			Expect(c.Kubeconfig).NotTo(BeAnExistingFile())
			Expect(c.InternalKubeconfig).NotTo(BeAnExistingFile())
		}
		var again cluster.DownResult
		meshctlJSON(&again, "down", "--env", env)
		Expect(again.Deleted).To(BeEmpty())
	})
})

// clientset is a client for one cluster of an environment that meshtest
// does not hold (the existing-cluster specs').
func clientset(kubeconfig string) *kubernetes.Clientset {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	return cs
}

func dockerStdin(stdin string, args ...string) (string, error) {
	cmd := execCommand("docker", args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// guardKindNetwork takes meshctl's kind network guard exclusively, as down
// does before it removes the network: no up creates kind containers until
// release. The file is meshctl's (pkg/cluster's networkGuard).
func guardKindNetwork() (release func()) {
	GinkgoHelper()
	f, err := os.OpenFile(filepath.Join(suite.artifacts, ".locks", "kind-network.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	Expect(err).NotTo(HaveOccurred())
	Expect(syscall.Flock(int(f.Fd()), syscall.LOCK_EX)).To(Succeed())
	return func() { f.Close() }
}
