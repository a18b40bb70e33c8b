package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/connect/remotesecret"
	"github.com/meshctl/meshctl/pkg/install/istio"
	"github.com/meshctl/meshctl/pkg/meshca"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// istioOutput is the istio part of what `up -o json` prints.
type istioOutput struct {
	Gateways []gateway.ClusterResult `json:"gateways"`
	Install  struct {
		Istio *installOutput `json:"istio"`
	} `json:"install"`
}

// istioSpecs: Istio's own control plane from Istio's charts on meshctl's
// clusters — two primaries on two networks and a remote of cluster1 on
// cluster1's network — `up --istio` with the offline images of
// `MESHCTL_ISTIO=1 make e2e-env` (hack/e2e/istio-build).
//
// They run on the IPv6 container's environment (ienv, IPv6 only, of that
// shape), as a user adds Istio to an environment they already have: the
// first spec is that up, with the environment's own arguments (upArgs)
// and --istio; a failure there skips the rest (the container is Ordered).
// Without the images they skip, saying why.
func istioSpecs(ienv string, upArgs func() []string, envOf func() *meshtest.Env) {
	Describe("Istio's control plane (up --istio)", func() {
		pilot := istio.DefaultHub + "/pilot:" + istio.DefaultTag()
		var mesh *meshtest.Env
		var up istioOutput
		var args []string

		BeforeEach(func() {
			if _, err := docker("image", "inspect", pilot); err != nil {
				Skip("image " + pilot + " is not in Docker: run `MESHCTL_ISTIO=1 make e2e-env`")
			}
			mesh = envOf()
		})

		It("installs istio-base and istiod everywhere, and a rerun changes nothing", func() {
			args = append(upArgs(), "--istio")
			meshctlJSON(&up, args...)
			Expect(up.Install.Istio).NotTo(BeNil())
			Expect(releaseActions(up.Install.Istio)).To(ConsistOf(allActions(up.Install.Istio, "installed")))
			Expect(releaseActions(up.Install.Istio)).To(HaveLen(6))
			var again istioOutput
			meshctlJSON(&again, args...)
			Expect(releaseActions(again.Install.Istio)).To(ConsistOf(allActions(again.Install.Istio, "unchanged")))
			Expect(again.Install.Istio.ImageLoaded).To(BeEmpty(), "the image is on every node already")
		})

		It("runs istiod Ready in each primary", func(ctx SpecContext) {
			for _, c := range mesh.Primaries() {
				d, err := c.Kube.AppsV1().Deployments("istio-system").Get(ctx, "istiod", metav1.GetOptions{})
				Expect(err).NotTo(HaveOccurred(), c.Name)
				Expect(d.Status.ReadyReplicas).To(BeNumerically(">=", 1), "%s: %+v", c.Name, d.Status)
				Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(pilot))
			}
		})

		It("lists every other cluster synced in each primary's /debug/clusterz", func(ctx SpecContext) {
			for _, c := range mesh.Primaries() {
				pods, err := c.Kube.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"})
				Expect(err).NotTo(HaveOccurred())
				Expect(pods.Items).NotTo(BeEmpty(), c.Name)
				Eventually(func(g Gomega) {
					out, errOut, err := c.Exec(ctx, "istio-system", pods.Items[0].Name, "discovery", "pilot-discovery", "request", "GET", "/debug/clusterz")
					g.Expect(err).NotTo(HaveOccurred(), errOut)
					var clusters []struct{ ID, SyncStatus string }
					g.Expect(json.Unmarshal([]byte(out), &clusters)).To(Succeed(), out)
					status := map[string]string{}
					for _, cl := range clusters {
						status[cl.ID] = cl.SyncStatus
					}
					for _, o := range mesh.Clusters() {
						if o.Name != c.Name {
							g.Expect(status).To(HaveKeyWithValue(o.Name, "synced"), "%s's istiod: %s", c.Name, out)
						}
					}
				}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
			}
		})

		It("shows cluster1's istiod the endpoints of a Service that has them only in cluster2", func(ctx SpecContext) {
			c2 := mesh.Cluster("cluster2")
			ns := "istio-e2e-only2"
			c2.Apply(ctx, "", `apiVersion: v1
kind: Namespace
metadata:
  name: `+ns+`
---
apiVersion: v1
kind: Pod
metadata:
  name: server
  namespace: `+ns+`
  labels: {app: only2}
spec:
  containers:
  - name: server
    image: `+suite.testImage+`
    command: ["sleep", "3600"]
---
apiVersion: v1
kind: Service
metadata:
  name: only2
  namespace: `+ns+`
spec:
  selector: {app: only2}
  ports:
  - {name: tcp, port: 80, targetPort: 8080}
`)
			var podIP string
			Eventually(func(g Gomega) {
				p, err := c2.Kube.CoreV1().Pods(ns).Get(ctx, "server", metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(p.Status.PodIP).NotTo(BeEmpty())
				podIP = p.Status.PodIP
			}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
			c1 := mesh.Cluster("cluster1")
			pod := istiodPod(ctx, c1)
			Eventually(func(g Gomega) {
				out, errOut, err := c1.Exec(ctx, "istio-system", pod, "discovery", "pilot-discovery", "request", "GET", "/debug/endpointShardz")
				g.Expect(err).NotTo(HaveOccurred(), errOut)
				var shards map[string]map[string]struct {
					Shards map[string][]struct{ Addresses []string }
				}
				g.Expect(json.Unmarshal([]byte(out), &shards)).To(Succeed())
				svc := shards["only2."+ns+".svc.cluster.local"][ns]
				g.Expect(svc.Shards).To(HaveKey("Kubernetes/cluster2"), "cluster1's istiod: %v", shards["only2."+ns+".svc.cluster.local"])
				var addrs []string
				for _, ep := range svc.Shards["Kubernetes/cluster2"] {
					addrs = append(addrs, ep.Addresses...)
				}
				g.Expect(addrs).To(ContainElement(podIP))
			}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		})

		It("carries every east-west gateway's MetalLB address in meshNetworks", func(ctx SpecContext) {
			gws := map[string]string{}
			for _, g := range up.Gateways {
				Expect(g.Address()).NotTo(BeEmpty(), g.Cluster)
				gws[g.Network] = g.Address()
			}
			Expect(gws).To(HaveLen(2))
			for _, c := range mesh.Primaries() {
				cm, err := c.Kube.CoreV1().ConfigMaps("istio-system").Get(ctx, "istio", metav1.GetOptions{})
				Expect(err).NotTo(HaveOccurred(), c.Name)
				var mn struct {
					Networks map[string]struct {
						Gateways []struct {
							Address string `json:"address"`
							Port    int    `json:"port"`
						} `json:"gateways"`
					} `json:"networks"`
				}
				Expect(yaml.Unmarshal([]byte(cm.Data["meshNetworks"]), &mn)).To(Succeed(), cm.Data["meshNetworks"])
				for network, addr := range gws {
					Expect(mn.Networks[network].Gateways).To(ContainElement(HaveField("Address", addr)), "%s: meshNetworks %s", c.Name, cm.Data["meshNetworks"])
				}
			}
		})

		It("points the remote at its primary's istiod: it injects the remote's pods", func(ctx SpecContext) {
			var istiodAddr string
			for _, g := range up.Gateways {
				if g.Cluster == "cluster1" {
					istiodAddr = g.IstiodAddress()
				}
			}
			Expect(istiodAddr).NotTo(BeEmpty(), "cluster1 exposes istiod to its remote: %+v", up.Gateways)
			c3 := mesh.Cluster("cluster3")
			hooks, err := c3.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: "app=sidecar-injector"})
			Expect(err).NotTo(HaveOccurred())
			Expect(hooks.Items).NotTo(BeEmpty())
			for _, h := range hooks.Items {
				for _, w := range h.Webhooks {
					cc := w.ClientConfig
					target := ""
					if cc.URL != nil {
						target = *cc.URL
					} else if cc.Service != nil && cc.Service.Path != nil {
						target = cc.Service.Namespace + "/" + cc.Service.Name + *cc.Service.Path
					}
					Expect(target).To(ContainSubstring("/inject/cluster/cluster3/net/network1"), "%s/%s", h.Name, w.Name)
				}
			}
			// The remote's istiod Service leads to cluster1's.
			eps, err := c3.Kube.DiscoveryV1().EndpointSlices("istio-system").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=istiod"})
			Expect(err).NotTo(HaveOccurred())
			var addrs []string
			for _, e := range eps.Items {
				for _, ep := range e.Endpoints {
					addrs = append(addrs, ep.Addresses...)
				}
			}
			Expect(addrs).To(ContainElement(istiodAddr))
			// A pod of an injected namespace goes through the webhook, served
			// by cluster1's istiod across the kind network.
			ns := "istio-e2e-inject"
			c3.Apply(ctx, "", `apiVersion: v1
kind: Namespace
metadata:
  name: `+ns+`
  labels: {istio-injection: enabled}
`)
			Eventually(func(g Gomega) {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{GenerateName: "injected-", Namespace: ns},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: suite.testImage, Command: []string{"sleep", "3600"}}}},
				}
				p, err := c3.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				var names []string
				for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
					names = append(names, c.Name)
				}
				g.Expect(names).To(ContainElement("istio-proxy"), "the pod was not injected")
			}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(5 * time.Second).Should(Succeed())
		})

		It("makes the same remote secret as istioctl create-remote-secret", func(ctx SpecContext) {
			istioctl := filepath.Join(envOr("MESHCTL_CACHE", "/var/cache/meshctl"), "istio", istio.Version, "bin", "istioctl")
			if _, err := os.Stat(istioctl); err != nil {
				Skip("istioctl is not built: run `MESHCTL_ISTIO=1 make e2e-env`: " + err.Error())
			}
			installed, err := mesh.Cluster("cluster1").Kube.CoreV1().Secrets("istio-system").Get(ctx, "istio-remote-secret-cluster2", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			var kc struct {
				Clusters []struct {
					Cluster struct {
						Server string `json:"server"`
					} `json:"cluster"`
				} `json:"clusters"`
			}
			Expect(yaml.Unmarshal(installed.Data["cluster2"], &kc)).To(Succeed())
			Expect(kc.Clusters).To(HaveLen(1))
			out, err := exec.CommandContext(ctx, istioctl, "create-remote-secret", "--kubeconfig", mesh.Cluster("cluster2").Kubeconfig,
				"--name", "cluster2", "--service-account", remotesecret.ServiceAccount, "--create-service-account=false",
				"--server", kc.Clusters[0].Cluster.Server).Output()
			Expect(err).NotTo(HaveOccurred(), string(out))
			var theirs corev1.Secret
			Expect(yaml.Unmarshal([]byte(strings.TrimSuffix(string(out), "---\n")), &theirs)).To(Succeed(), string(out))
			Expect(theirs.Name).To(Equal(installed.Name))
			Expect(theirs.Annotations).To(HaveKeyWithValue("networking.istio.io/cluster", "cluster2"))
			Expect(installed.Annotations).To(HaveKeyWithValue("networking.istio.io/cluster", "cluster2"))
			Expect(theirs.Labels).To(HaveKeyWithValue("istio/multiCluster", "true"))
			Expect(installed.Labels).To(HaveKeyWithValue("istio/multiCluster", "true"))
			// The kubeconfig is the same but for the token, which is each
			// tool's own read of the reader's token Secret (the same one).
			Expect(normalizeKubeconfig(theirs.StringData["cluster2"])).To(Equal(normalizeKubeconfig(string(installed.Data["cluster2"]))))
		})

		It("distributes meshctl's root as istio-ca-root-cert", func(ctx SpecContext) {
			root, err := os.ReadFile(filepath.Join(meshca.Dir(suite.artifacts, ienv), meshca.RootCertFile))
			Expect(err).NotTo(HaveOccurred())
			for _, c := range mesh.Clusters() {
				Eventually(func(g Gomega) {
					cm, err := c.Kube.CoreV1().ConfigMaps("istio-system").Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(cm.Data["root-cert.pem"]).To(Equal(string(root)), c.Name)
				}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
			}
		})

		It("uninstall removes istiod and istio-base, remotes first", func() {
			var res installOutput
			meshctlJSON(&res, "uninstall", "--env", ienv)
			for _, c := range res.Clusters {
				for _, r := range c.Releases {
					if r.Name == "istiod" || r.Name == "istio-base" {
						Expect(r.Action).To(Equal("uninstalled"), "%s/%s", c.Cluster, r.Name)
					}
				}
			}
		})
	})
}

// istiodPod is the name of an istiod pod of c.
func istiodPod(ctx context.Context, c *meshtest.Cluster) string {
	GinkgoHelper()
	pods, err := c.Kube.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"})
	Expect(err).NotTo(HaveOccurred())
	Expect(pods.Items).NotTo(BeEmpty(), c.Name)
	return pods.Items[0].Name
}

// normalizeKubeconfig parses a remote secret's kubeconfig into a map with
// its tokens removed, so that two tools' secrets compare by content.
func normalizeKubeconfig(s string) map[string]any {
	GinkgoHelper()
	var m map[string]any
	Expect(yaml.Unmarshal([]byte(s), &m)).To(Succeed(), s)
	users, _ := m["users"].([]any)
	for _, u := range users {
		if um, ok := u.(map[string]any); ok {
			if user, ok := um["user"].(map[string]any); ok {
				Expect(user["token"]).NotTo(BeEmpty())
				delete(user, "token")
			}
		}
	}
	return m
}
