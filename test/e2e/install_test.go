package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/pkg/cluster"
)

// installOutput is what `up -o json` and `install -o json` print.
type installOutput struct {
	Image    string `json:"image"`
	ImageID  string `json:"imageID"`
	Clusters []struct {
		Cluster  string `json:"cluster"`
		Error    string `json:"error"`
		Releases []struct {
			Name     string `json:"name"`
			Action   string `json:"action"`
			Revision int    `json:"revision"`
		} `json:"releases"`
	} `json:"clusters"`
}

type upInstallOutput struct {
	cluster.UpResult
	Install *installOutput `json:"install"`
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

var _ = Describe("the dataplane install", Ordered, func() {
	instEnv := env + "-inst"
	var up upInstallOutput
	nodes := map[string][]string{} // cluster -> node names

	BeforeAll(func() {
		DeferCleanup(func() {
			if os.Getenv("MESHCTL_E2E_KEEP") != "" {
				return
			}
			_, _, _ = meshctlResult("down", "--env", instEnv)
		})
	})

	It("up creates two clusters and installs the dataplane into both", func() {
		meshctlJSON(&up, "up", "--env", instEnv, "--clusters", "2", "--image", suite.image, "--registry=false")
		Expect(up.Clusters).To(HaveLen(2))
		Expect(up.Install).NotTo(BeNil())
		Expect(up.Install.Image).To(HavePrefix("meshctl/dataplane:"))
		Expect(releaseActions(up.Install)).To(ConsistOf(allActions(up.Install, "installed")))
		Expect(releaseActions(up.Install)).To(HaveLen(4))
		for _, c := range up.Clusters {
			list, err := clientset(c.Kubeconfig).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			for _, n := range list.Items {
				nodes[c.Name] = append(nodes[c.Name], n.Name)
			}
		}
	})

	It("side-loaded the dataplane image into every node's containerd", func() {
		ref := strings.TrimPrefix(up.Install.Image, "meshctl/")
		for _, ns := range nodes {
			for _, n := range ns {
				out, err := docker("exec", n, "ctr", "--namespace=k8s.io", "images", "ls", "-q")
				Expect(err).NotTo(HaveOccurred(), out)
				Expect(out).To(ContainSubstring("meshctl/"+ref), "node %s", n)
			}
		}
	})

	It("runs the CNI and proxy DaemonSets Ready on every node, and the signer", func() {
		ctx := context.Background()
		for _, c := range up.Clusters {
			cs := clientset(c.Kubeconfig)
			for _, name := range []string{"meshctl-cni-node", "meshctl-proxy"} {
				ds, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, name, metav1.GetOptions{})
				Expect(err).NotTo(HaveOccurred())
				Expect(ds.Status.DesiredNumberScheduled).To(BeEquivalentTo(len(nodes[c.Name])), "%s/%s", c.Name, name)
				Expect(ds.Status.NumberReady).To(Equal(ds.Status.DesiredNumberScheduled), "%s/%s: %+v", c.Name, name, ds.Status)
			}
			d, err := cs.AppsV1().Deployments("istio-system").Get(ctx, "meshctl-signer", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(d.Status.ReadyReplicas).To(BeEquivalentTo(1), "%s signer: %+v", c.Name, d.Status)
		}
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

	It("still starts ordinary (unmeshed) pods through the chained plugin", func() {
		runPod(clientset(up.Clusters[0].Kubeconfig), "inst-plain", suite.testImage, "Never")
	})

	It("re-installing with nothing changed changes nothing", func() {
		var again installOutput
		meshctlJSON(&again, "install", "--env", instEnv)
		Expect(releaseActions(&again)).To(ConsistOf(allActions(&again, "unchanged")))
		Expect(again.ImageID).To(Equal(up.Install.ImageID))
	})

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

	It("uninstall removes the releases, the CNI entry and the plugin binary", func() {
		var res installOutput
		meshctlJSON(&res, "uninstall", "--env", instEnv)
		Expect(releaseActions(&res)).To(ConsistOf(allActions(&res, "uninstalled")))
		ctx := context.Background()
		for _, c := range up.Clusters {
			cs := clientset(c.Kubeconfig)
			for _, name := range []string{"meshctl-cni-node", "meshctl-proxy"} {
				_, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, name, metav1.GetOptions{})
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s/%s: %v", c.Name, name, err)
			}
		}
		for _, ns := range nodes {
			for _, n := range ns {
				Eventually(func() string { return primaryConflist(n) }).WithTimeout(2*time.Minute).
					ShouldNot(ContainSubstring("meshctl-cni"), "node %s", n)
				Eventually(func() error {
					_, err := docker("exec", n, "test", "!", "-e", "/opt/cni/bin/meshctl-cni")
					return err
				}).WithTimeout(time.Minute).Should(Succeed(), "node %s still has /opt/cni/bin/meshctl-cni", n)
			}
		}
	})

	It("installs again after an uninstall", func() {
		var res installOutput
		meshctlJSON(&res, "install", "--env", instEnv)
		Expect(releaseActions(&res)).To(ConsistOf(allActions(&res, "installed")))
	})

	// The goal of the dataplane: a pod in an ambient namespace starts
	// (the plugin asked the node agent, which redirected it and handed it
	// to the proxy) and its traffic to another meshed pod crosses the
	// proxies over HBONE.
	It("meshes pods of an ambient namespace and carries their traffic over HBONE", func() {
		ctx := context.Background()
		c := up.Clusters[0]
		cs := clientset(c.Kubeconfig)
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: "meshed", Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		server := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "meshed"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "web", Image: suite.testImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "mkdir -p /www && echo meshctl-e2e-meshed > /www/index.html && exec httpd -f -p 8080 -h /www"},
			}}},
		}
		_, err = cs.CoreV1().Pods("meshed").Create(ctx, server, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		var ip string
		Eventually(func(g Gomega) {
			p, err := cs.CoreV1().Pods("meshed").Get(ctx, "web", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "%+v", p.Status)
			ip = p.Status.PodIP
		}).WithTimeout(2 * time.Minute).WithPolling(3 * time.Second).Should(Succeed())

		client := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: "meshed"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
				Name: "main", Image: suite.testImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "for i in 1 2 3 4 5; do printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 " + ip + " 8080 && exit 0; sleep 2; done; exit 1"},
			}}},
		}
		_, err = cs.CoreV1().Pods("meshed").Create(ctx, client, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			p, err := cs.CoreV1().Pods("meshed").Get(ctx, "client", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Status.Phase).NotTo(Equal(corev1.PodFailed), "client failed")
			g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), "%+v", p.Status)
		}).WithTimeout(3 * time.Minute).WithPolling(3 * time.Second).Should(Succeed())
		logs, err := cs.CoreV1().Pods("meshed").GetLogs("client", &corev1.PodLogOptions{}).DoRaw(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(logs)).To(ContainSubstring("meshctl-e2e-meshed"))

		// The proxy on the client's node opened an outbound HBONE tunnel.
		p, err := cs.CoreV1().Pods("meshed").Get(ctx, "client", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		proxies, err := cs.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=meshctl-proxy", FieldSelector: "spec.nodeName=" + p.Spec.NodeName})
		Expect(err).NotTo(HaveOccurred())
		Expect(proxies.Items).To(HaveLen(1))
		metrics, err := docker("exec", p.Spec.NodeName, "curl", "-s", "http://"+proxies.Items[0].Status.PodIP+":15020/metrics")
		Expect(err).NotTo(HaveOccurred(), metrics)
		Expect(metrics).To(MatchRegexp(`meshctl_hbone_connections_opened_total\{direction="outbound"\} [1-9]`))
	})
})
