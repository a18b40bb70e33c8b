package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// An existing (non-kind) cluster is a real etcd + kube-apiserver started by
// this process, named in a topology by its kubeconfig, next to one real kind
// cluster.
var _ = Describe("an environment mixing kind with an existing cluster", Ordered, func() {
	xenv := env + "-x"
	var (
		api      *testenv.Env
		apiCS    *kubernetes.Clientset
		topology string
		res      cluster.UpResult
	)

	BeforeAll(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var err error
		api, err = testenv.Start(ctx)
		if errors.Is(err, testenv.ErrBinariesMissing) {
			Skip(err.Error())
		}
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = api.Stop() })
		apiCS = kubernetes.NewForConfigOrDie(api.Config)

		// What the cluster's owner has in it: a node with its pod CIDR
		// (no kubelet here: registered as one would), and an object of
		// theirs that down must leave alone.
		node, err := apiCS.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "existing-node"},
			Spec:       corev1.NodeSpec{PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24"}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
		_, err = apiCS.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = apiCS.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "owners-data"}, Data: map[string]string{"keep": "me"},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		// The cluster's own load-balancer controller (a cloud's, in real
		// life): it gives the east-west gateway Service an address, since
		// the two clusters are on different networks and meshctl installs
		// MetalLB only on kind clusters. 203.0.113.0/24 is TEST-NET-3:
		// never contacted.
		lbCtx, stopLB := context.WithCancel(context.Background())
		DeferCleanup(stopLB)
		go func() {
			defer GinkgoRecover()
			for lbCtx.Err() == nil {
				svc, err := apiCS.CoreV1().Services("istio-system").Get(lbCtx, "istio-eastwestgateway", metav1.GetOptions{})
				if err == nil && len(svc.Status.LoadBalancer.Ingress) == 0 {
					svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}}
					_, _ = apiCS.CoreV1().Services("istio-system").UpdateStatus(lbCtx, svc, metav1.UpdateOptions{})
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()

		dir := GinkgoT().TempDir()
		kc := clientcmdapi.NewConfig()
		kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: api.Config.Host, CertificateAuthorityData: api.Config.CAData}
		kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: api.Config.CertData, ClientKeyData: api.Config.KeyData}
		kc.Contexts["existing-admin"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
		Expect(clientcmd.WriteToFile(*kc, filepath.Join(dir, "existing.kubeconfig"))).To(Succeed())
		topology = filepath.Join(dir, "topology.json")
		Expect(os.WriteFile(topology, []byte(`[
  {"clusterName": "kind1", "network": "network-1"},
  {"clusterName": "ext", "network": "network-2", "primaryClusterName": "kind1",
   "meta": {"kubeconfig": "existing.kubeconfig", "context": "existing-admin"}}
]`), 0o600)).To(Succeed())

		DeferCleanup(func() {
			if os.Getenv("MESHCTL_E2E_KEEP") != "" {
				return
			}
			_, _, _ = meshctlResult("down", "--env", xenv)
		})
	})

	It("creates the kind cluster and checks, discovers and records the existing one", func() {
		meshctlJSON(&res, "up", "--env", xenv, "--topology", topology, "--image", suite.image, "--registry=false", "--install=false", "--remote-secrets=false")
		Expect(res.Clusters).To(HaveLen(2))
		Expect(res.Clusters[0].Action).To(Equal(cluster.ActionCreated))
		Expect(res.Clusters[0].KindName).To(Equal(xenv + "-kind1"))
		Expect(res.Clusters[1].Action).To(Equal(cluster.ActionExisting))
		Expect(res.Clusters[1].KindName).To(BeEmpty())

		st, err := os.Stat(res.Clusters[1].Kubeconfig)
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)))
		claim, err := clientset(res.Clusters[1].Kubeconfig).CoreV1().ConfigMaps(model.ClaimNamespace).Get(context.Background(), model.ClaimName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(claim.Data).To(HaveKeyWithValue("env", xenv))

		// Different networks: the existing cluster got the gateway Service
		// (its address from its own load balancer), and no MetalLB.
		svc, err := apiCS.CoreV1().Services("istio-system").Get(context.Background(), "istio-eastwestgateway", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeLoadBalancer))
		Expect(svc.Status.LoadBalancer.Ingress).To(HaveLen(1))
		Expect(svc.Status.LoadBalancer.Ingress[0].IP).To(Equal("203.0.113.10"))
		_, err = apiCS.CoreV1().Namespaces().Get(context.Background(), "metallb-system", metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "metallb-system in the existing cluster: %v", err)
	})

	It("installs the shared root CA in both", func() {
		var roots []string
		for _, c := range res.Clusters {
			sec, err := clientset(c.Kubeconfig).CoreV1().Secrets("istio-system").Get(context.Background(), "cacerts", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), c.Name)
			roots = append(roots, string(sec.Data["root-cert.pem"]))
		}
		Expect(roots[1]).To(Equal(roots[0]))
	})

	It("shows both in status and list, the existing one with what was discovered", func() {
		var st cluster.StatusResult
		Eventually(func(g Gomega) {
			meshctlJSON(&st, "status", "--env", xenv)
			g.Expect(st.Clusters).To(HaveLen(2))
			g.Expect(st.Ready).To(BeTrue(), "status: %+v", st)
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		ext := st.Clusters[0]
		Expect(ext.Name).To(Equal("ext"))
		Expect(ext.Existing).To(BeTrue())
		Expect(ext.Discovery).NotTo(BeNil())
		Expect(ext.Discovery.Server).To(Equal(api.Config.Host))
		Expect(ext.PodSubnets).To(Equal([]string{"10.244.0.0/24"}))
		Expect(ext.ServiceSubnets).To(Equal([]string{"10.0.0.0/24"})) // testenv's --service-cluster-ip-range
		Expect(ext.Nodes).To(HaveLen(1))
		Expect(st.Clusters[1].KindName).To(Equal(xenv + "-kind1"))

		out := meshctl("list")
		Expect(out).To(MatchRegexp(`%s\s+ext\s+\(existing\)\s+network-2`, xenv))
		Expect(out).To(MatchRegexp(`%s\s+kind1\s+%s-kind1\s+network-1`, xenv, xenv))
	})

	It("refuses the existing cluster to another environment, before creating anything", func() {
		other := filepath.Join(filepath.Dir(topology), "other.json")
		Expect(os.WriteFile(other, []byte(`[{"clusterName": "kind9"},
  {"clusterName": "ext", "network": "far", "meta": {"kubeconfig": "existing.kubeconfig", "context": "existing-admin"}}]`), 0o600)).To(Succeed())
		_, errOut, err := meshctlResult("up", "--env", xenv+"o", "--topology", other, "--image", suite.image, "--registry=false", "--install=false", "--remote-secrets=false")
		Expect(err).To(HaveOccurred())
		Expect(errOut).To(ContainSubstring(fmt.Sprintf(`cluster "ext": is used by meshctl environment %q`, xenv)))
		Expect(kindClusters()).NotTo(ContainElement(xenv + "o-kind9"))
	})

	It("down deletes only the kind cluster and uninstalls meshctl's objects from the existing one", func() {
		var down cluster.DownResult
		meshctlJSON(&down, "down", "--env", xenv)
		Expect(down.Deleted).To(Equal([]string{xenv + "-kind1"}))
		Expect(down.Uninstalled).To(HaveLen(1))
		Expect(down.Uninstalled[0].Cluster).To(Equal("ext"))
		Expect(down.Uninstalled[0].Objects).To(ContainElements(
			"secrets/istio-system/cacerts", "configmaps/meshctl-system/meshctl-cluster", "namespaces/meshctl-system"))
		Expect(kindClusters()).NotTo(ContainElement(xenv + "-kind1"))

		ctx := context.Background()
		_, err := apiCS.CoreV1().Secrets("istio-system").Get(ctx, "cacerts", metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "cacerts: %v", err)
		_, err = apiCS.CoreV1().ConfigMaps("default").Get(ctx, "owners-data", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the owner's ConfigMap")
		_, err = apiCS.CoreV1().Nodes().Get(ctx, "existing-node", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the owner's node")
		_, err = apiCS.CoreV1().Namespaces().Get(ctx, "istio-system", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "istio-system was not meshctl's to delete (not labelled)")
		_, err = os.Stat(res.Clusters[1].Kubeconfig)
		Expect(os.IsNotExist(err)).To(BeTrue(), "the kubeconfig copy: %v", err)

		var st cluster.StatusResult
		meshctlJSON(&st, "status", "--env", xenv)
		Expect(st.Clusters).To(BeEmpty())
	})
})

// kindClusters lists the kind clusters on this machine, by their
// control-plane containers (the e2e tier has no kind CLI).
func kindClusters() []string {
	GinkgoHelper()
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=io.x-k8s.kind.cluster", "--format", `{{.Label "io.x-k8s.kind.cluster"}}`).Output()
	Expect(err).NotTo(HaveOccurred())
	return strings.Fields(string(out))
}

// A real cluster that meshctl did not create and must not delete: a kind
// cluster made by another `meshctl up` (env "<env>-xe", with its own
// registry, which its nodes pull from as localhost:<port>), named in a
// topology by its kubeconfig next to a new kind cluster. Its nodes are not
// side-loaded: the dataplane image is pushed to the registry and pulled,
// and the remote secrets carry the API address its kubeconfig has.
var _ = Describe("an existing cluster with the dataplane image pushed to its registry", Ordered, func() {
	owner := env + "-xe" // the environment that made the "existing" cluster
	xenv := env + "-xp"
	registryName := "meshctl-" + owner + "-registry"
	var (
		registryHost  string
		extKubeconfig string
		up            upInstallRemoteOutput
	)

	BeforeAll(func() {
		port, err := strconv.Atoi(envOr("MESHCTL_E2E_REGISTRY_PORT", "5001"))
		Expect(err).NotTo(HaveOccurred(), "MESHCTL_E2E_REGISTRY_PORT")
		registryHost = fmt.Sprintf("localhost:%d", port+2)
		DeferCleanup(func() {
			if os.Getenv("MESHCTL_E2E_KEEP") != "" {
				return
			}
			_, _, _ = meshctlResult("down", "--env", xenv)
			_, _, _ = meshctlResult("down", "--env", owner, "--registry", "--registry-name", registryName)
		})
		var pre cluster.UpResult
		meshctlJSON(&pre, "up", "--env", owner, "--clusters", "1", "--image", suite.image,
			"--registry-image", suite.registryImage, "--registry-name", registryName, "--registry-port", strconv.Itoa(port+2),
			"--install=false", "--cacerts=false", "--remote-secrets=false")
		Expect(pre.Clusters).To(HaveLen(1))
		// The owner's kubeconfig, copied where the topology names it: the
		// address is the host's (127.0.0.1:<port>), as a cloud cluster's
		// kubeconfig names its public endpoint.
		dir := GinkgoT().TempDir()
		data, err := os.ReadFile(pre.Clusters[0].Kubeconfig)
		Expect(err).NotTo(HaveOccurred())
		extKubeconfig = filepath.Join(dir, "ext.kubeconfig")
		Expect(os.WriteFile(extKubeconfig, data, 0o600)).To(Succeed())
	})

	It("refuses to install on the existing cluster without a registry, before creating anything", func() {
		topology := writeTopology(filepath.Dir(extKubeconfig))
		_, errOut, err := meshctlResult("up", "--env", xenv, "--topology", topology, "--image", suite.image, "--registry=false")
		Expect(err).To(HaveOccurred())
		Expect(errOut).To(ContainSubstring("cluster(s) ext"))
		Expect(errOut).To(ContainSubstring("--image-registry"))
		Expect(kindClusters()).NotTo(ContainElement(xenv + "-kind1"))
	})

	It("pushes the image, side-loads the kind cluster, and runs the dataplane in both", func() {
		topology := writeTopology(filepath.Dir(extKubeconfig))
		meshctlJSON(&up, "up", "--env", xenv, "--topology", topology, "--image", suite.image, "--registry=false",
			"--image-registry", registryHost)
		Expect(up.Clusters).To(HaveLen(2))
		Expect(up.Clusters[1].Action).To(Equal(cluster.ActionExisting))
		Expect(up.Install).NotTo(BeNil())
		Expect(up.Install.Image).To(HavePrefix(registryHost + "/meshctl/dataplane:"))
		Expect(up.Install.Pushed).To(HavePrefix(registryHost + "/meshctl/dataplane@sha256:"))
		Expect(releaseActions(&up.Install.installOutput)).To(ConsistOf(allActions(&up.Install.installOutput, "installed")))

		// The existing cluster's node pulled the image (it was never
		// side-loaded there); the kind cluster's node had it side-loaded.
		ctx := context.Background()
		for _, c := range up.Clusters {
			cs := clientset(c.Kubeconfig)
			ds, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-proxy", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), c.Name)
			Expect(ds.Status.NumberReady).To(BeNumerically(">=", 1), "%s: %+v", c.Name, ds.Status)
			Expect(ds.Spec.Template.Spec.Containers[0].Image).To(Equal(up.Install.Image), c.Name)
		}
		events, err := clientset(extKubeconfig).CoreV1().Events("istio-system").List(ctx, metav1.ListOptions{FieldSelector: "reason=Pulled"})
		Expect(err).NotTo(HaveOccurred())
		var pulled []string
		for _, e := range events.Items {
			pulled = append(pulled, e.Message)
		}
		Expect(strings.Join(pulled, "\n")).To(ContainSubstring("Successfully pulled image \""+up.Install.Image+"\""), "Pulled events in the existing cluster")
	})

	It("gives each primary a remote secret whose kubeconfig works against the other cluster", func() {
		Expect(up.RemoteSecrets).NotTo(BeNil())
		ctx := context.Background()
		for i, c := range up.Clusters {
			other := up.Clusters[1-i]
			sec, err := clientset(c.Kubeconfig).CoreV1().Secrets("istio-system").Get(ctx, "istio-remote-secret-"+other.Name, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), "%s's remote secret for %s", c.Name, other.Name)
			cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data[other.Name])
			Expect(err).NotTo(HaveOccurred())
			if other.Name == "ext" {
				// The existing cluster's real API address: its kubeconfig's.
				own, err := clientcmd.BuildConfigFromFlags("", extKubeconfig)
				Expect(err).NotTo(HaveOccurred())
				Expect(cfg.Host).To(Equal(own.Host))
			}
			// The reader's token is good: it lists the other cluster's pods.
			_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred(), "reading %s with %s's remote secret", other.Name, c.Name)
		}
	})

	It("down deletes the kind cluster and uninstalls the charts from the existing one, which stays", func() {
		var down cluster.DownResult
		meshctlJSON(&down, "down", "--env", xenv)
		Expect(down.Deleted).To(Equal([]string{xenv + "-kind1"}))
		ctx := context.Background()
		cs := clientset(extKubeconfig)
		Eventually(func() bool {
			_, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-proxy", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(2 * time.Minute).Should(BeTrue())
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(nodes.Items).NotTo(BeEmpty())
		Expect(kindClusters()).To(ContainElement(owner + "-cluster1"))
	})
})

// upInstallRemoteOutput is what `up -o json` prints with the install and
// the remote secrets.
type upInstallRemoteOutput struct {
	cluster.UpResult
	Install *struct {
		installOutput
		Pushed string `json:"pushed"`
	} `json:"install"`
	RemoteSecrets *struct {
		Secrets []struct {
			Secret, Target, Server, Action string
		} `json:"secrets"`
	} `json:"remoteSecrets"`
}

// writeTopology names the kind cluster and the existing one, on one network
// (their pods are not routed to each other: nothing here sends traffic
// between them). The kind cluster's subnets are stated so that they differ
// from the existing cluster's, which were planned as cluster1's too.
func writeTopology(dir string) string {
	GinkgoHelper()
	path := filepath.Join(dir, "topology.json")
	Expect(os.WriteFile(path, []byte(`[
  {"clusterName": "kind1", "network": "network-1", "podSubnet": "10.30.0.0/16", "svcSubnet": "10.130.0.0/16"},
  {"clusterName": "ext", "network": "network-1",
   "meta": {"kubeconfig": "ext.kubeconfig", "podNetworkRoutable": true}}
]`), 0o600)).To(Succeed())
	return path
}
