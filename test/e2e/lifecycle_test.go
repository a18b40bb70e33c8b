package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/connect"
)

// env, registryName and registryPort default to "e2e", meshctl-e2e-registry and
// 5001; MESHCTL_E2E_ENV and MESHCTL_E2E_REGISTRY_PORT change them so that two runs
// of the suite on one machine (two developers, two worktrees) never share clusters.
var (
	env          = envOr("MESHCTL_E2E_ENV", "e2e")
	registryName = "meshctl-" + env + "-registry"
	registryPort = envOr("MESHCTL_E2E_REGISTRY_PORT", "5001")
)

var _ = Describe("the cluster lifecycle", Ordered, func() {
	var upArgs []string
	var res cluster.UpResult

	BeforeAll(func() {
		upArgs = []string{"up", "--env", env, "--clusters", "2", "--image", suite.image,
			"--registry-image", suite.registryImage, "--registry-name", registryName, "--registry-port", registryPort, "--install=false"}
		DeferCleanup(func() {
			if os.Getenv("MESHCTL_E2E_KEEP") != "" {
				return
			}
			// Whatever happened, leave nothing behind.
			_, _, _ = meshctlResult("down", "--env", env, "--registry", "--registry-name", registryName)
		})
	})

	It("creates two clusters in parallel, with a registry", func() {
		meshctlJSON(&res, upArgs...)
		Expect(res.Clusters).To(HaveLen(2))
		for _, c := range res.Clusters {
			Expect(c.Action).To(Equal(cluster.ActionCreated))
			Expect(c.KindName).To(Equal(env + "-" + c.Name))
		}
		Expect(res.Registry).NotTo(BeNil())
	})

	It("installs one root CA and a distinct intermediate in every cluster", func() {
		var roots, intermediates []string
		for _, c := range res.Clusters {
			sec, err := clientset(c.Kubeconfig).CoreV1().Secrets("istio-system").Get(context.Background(), "cacerts", metav1.GetOptions{})
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

	It("reports every node Ready, with pod CIDRs from the plan", func() {
		var st cluster.StatusResult
		Eventually(func(g Gomega) {
			meshctlJSON(&st, "status", "--env", env, "--registry-name", registryName)
			g.Expect(st.Ready).To(BeTrue(), "status: %+v", st)
		}).WithTimeout(3 * time.Minute).WithPolling(5 * time.Second).Should(Succeed())
		Expect(st.Registry).NotTo(BeNil())
		Expect(st.Registry.Running).To(BeTrue())
		for i, c := range st.Clusters {
			Expect(c.PodSubnets).To(Equal([]string{fmt.Sprintf("10.%d.0.0/16", 10*(i+1))}))
			for _, n := range c.Nodes {
				Expect(n.PodCIDRs).NotTo(BeEmpty(), "node %s", n.Name)
				Expect(n.PodCIDRs[0]).To(HavePrefix(fmt.Sprintf("10.%d.", 10*(i+1))))
			}
		}
	})

	It("runs CoreDNS and a test pod in each cluster, from the host kubeconfig", func() {
		for _, c := range res.Clusters {
			cs := clientset(c.Kubeconfig)
			Eventually(func(g Gomega) {
				pods, err := cs.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pods.Items).NotTo(BeEmpty())
				for _, p := range pods.Items {
					g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "%s/%s", c.Name, p.Name)
				}
			}).WithTimeout(3 * time.Minute).WithPolling(5 * time.Second).Should(Succeed())
			runPod(cs, "hello", suite.testImage, corev1.PullNever)
		}
	})

	It("routes pods and services between the clusters of one network", func() {
		var conn connect.Result
		meshctlJSON(&conn, "connect", "--env", env)
		Expect(conn.Nodes).To(HaveLen(2))
		for _, n := range conn.Nodes {
			Expect(n.Routes).To(HaveLen(2), "node %s: a pod CIDR and a service CIDR of the peer", n.Node)
		}
		server := clientset(res.Clusters[1].Kubeconfig)
		client := clientset(res.Clusters[0].Kubeconfig)
		podIP := startWebServer(server, "web")
		svc, err := server.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(svc.Spec.ClusterIP).To(HavePrefix("10.255.20."))
		for i, target := range []string{podIP, svc.Spec.ClusterIP} {
			name := fmt.Sprintf("fetch-%d", i)
			// busybox's nc, not its wget: the static wget of Debian's busybox
			// crashes in these pods.
			runPodCmd(client, name, suite.testImage, corev1.PullNever, `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 `+target+` 8080`)
			Expect(podLogs(client, name)).To(ContainSubstring("meshctl-e2e-web"), "from cluster1 to %s in cluster2", target)
		}
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

	It("pulls an image pushed to the local registry", func() {
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
		for _, c := range res.Clusters {
			cs := clientset(c.Kubeconfig)
			cm, err := cs.CoreV1().ConfigMaps("kube-public").Get(context.Background(), "local-registry-hosting", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(cm.Data["localRegistryHosting.v1"]).To(ContainSubstring("localhost:" + registryPort))
			runPod(cs, "from-registry", ref, corev1.PullAlways)
		}
	})

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

	It("lists the environment", func() {
		var all []cluster.Existing
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
		var down cluster.DownResult
		meshctlJSON(&down, "down", "--env", env, "--registry", "--registry-name", registryName)
		Expect(down.Deleted).To(ConsistOf(env+"-cluster1", env+"-cluster2"))
		out, err := docker("ps", "-a", "--filter", "label=io.x-k8s.kind.cluster", "--format", "{{.Names}}")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).NotTo(ContainSubstring(env + "-cluster"))
		out, _ = docker("ps", "-a", "--filter", "name=^"+registryName+"$", "--format", "{{.Names}}")
		Expect(strings.TrimSpace(out)).To(BeEmpty())
		if strings.TrimSpace(func() string { o, _ := docker("ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster"); return o }()) == "" {
			out, _ = docker("network", "ls", "--filter", "name=^kind$", "--format", "{{.Name}}")
			Expect(strings.TrimSpace(out)).To(BeEmpty(), "the kind network outlived the last cluster")
		}
		for _, c := range res.Clusters {
			Expect(c.Kubeconfig).NotTo(BeAnExistingFile())
			Expect(c.InternalKubeconfig).NotTo(BeAnExistingFile())
		}
		var again cluster.DownResult
		meshctlJSON(&again, "down", "--env", env)
		Expect(again.Deleted).To(BeEmpty())
	})
})

func clientset(kubeconfig string) *kubernetes.Clientset {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	return cs
}

// runPod runs a pod that prints and exits, and waits for it to succeed.
func runPod(cs *kubernetes.Clientset, name, image string, pull corev1.PullPolicy) {
	GinkgoHelper()
	runPodCmd(cs, name, image, pull, "echo meshctl-e2e-ok")
}

// runPodCmd runs script in a pod and waits for it to succeed.
func runPodCmd(cs *kubernetes.Clientset, name, image string, pull corev1.PullPolicy, script string) {
	GinkgoHelper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: image, ImagePullPolicy: pull,
				Command: []string{"sh", "-c", script},
			}},
		},
	}
	_, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Status.Phase).NotTo(Equal(corev1.PodFailed), "pod %s failed: %s", name, podLogs(cs, name))
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), "pod %s: %+v", name, p.Status)
	}).WithTimeout(3 * time.Minute).WithPolling(3 * time.Second).Should(Succeed())
}

// startWebServer runs busybox httpd in a pod labelled app=NAME and returns
// the pod's IP once it runs.
func startWebServer(cs *kubernetes.Clientset, name string) string {
	GinkgoHelper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: suite.testImage, ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh", "-c", "mkdir -p /www && echo meshctl-e2e-web > /www/index.html && exec httpd -f -p 8080 -h /www"},
		}}},
	}
	_, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	var ip string
	Eventually(func(g Gomega) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.Status.PodIP).NotTo(BeEmpty())
		ip = p.Status.PodIP
	}).WithTimeout(3 * time.Minute).WithPolling(3 * time.Second).Should(Succeed())
	return ip
}

func podLogs(cs *kubernetes.Clientset, name string) string {
	out, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	return string(out)
}

func dockerStdin(stdin string, args ...string) (string, error) {
	cmd := execCommand("docker", args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
