package e2e

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/pkg/connect/check"
	"github.com/meshctl/meshctl/pkg/connect/remotesecret"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// connectSpecs are the remote secrets' and the connectivity check's specs,
// run on the lifecycle container's two-cluster environment (one network, no
// dataplane) before its faults and its down: an environment of their own
// cost two more kind clusters for nothing the lifecycle's does not have.
// secrets is what that environment's first up reported.
func connectSpecs(connEnv string, secrets func() *remotesecret.Result, mesh func() *meshtest.Env) {
	It("installs each cluster's remote secret in the other", func() {
		rs := secrets()
		Expect(rs).NotTo(BeNil())
		Expect(rs.Readers).To(HaveLen(2))
		var got []string
		for _, s := range rs.Secrets {
			got = append(got, fmt.Sprintf("%s in %s: %s", s.Secret, s.Target, s.Action))
		}
		Expect(got).To(ConsistOf(
			"istio-system/istio-remote-secret-cluster1 in cluster2: created",
			"istio-system/istio-remote-secret-cluster2 in cluster1: created",
		))
	})

	It("gives each cluster a kubeconfig that works from the other cluster's node, read-only", func(ctx SpecContext) {
		for _, p := range [][2]string{{"cluster1", "cluster2"}, {"cluster2", "cluster1"}} {
			source, target := p[0], p[1]
			sec, err := mesh().Cluster(target).Kube.CoreV1().Secrets("istio-system").Get(ctx, "istio-remote-secret-"+source, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(sec.Labels).To(HaveKeyWithValue("istio/multiCluster", "true"))
			Expect(sec.Annotations).To(HaveKeyWithValue("networking.istio.io/cluster", source))
			Expect(sec.Data).To(HaveLen(1))
			kc := sec.Data[source]
			cfg, err := clientcmd.Load(kc)
			Expect(err).NotTo(HaveOccurred())
			// By the control-plane container's name, which Docker's DNS on the
			// kind network resolves to its current address (a Docker restart
			// changes the address, not the name).
			Expect(cfg.Clusters[source].Server).To(Equal("https://"+connEnv+"-"+source+"-control-plane:6443"), "the source's API server by name on the kind network")
			Expect(cfg.AuthInfos[source].Token).NotTo(BeEmpty())

			// From the target's node container, as the target's istiod would.
			node := connEnv + "-" + target + "-control-plane"
			path := "/tmp/remote-" + source + ".kubeconfig"
			out, err := dockerStdin(string(kc), "exec", "-i", node, "sh", "-c", "umask 077 && cat > "+path)
			Expect(err).NotTo(HaveOccurred(), out)
			out, err = docker("exec", node, "kubectl", "--kubeconfig", path, "get", "pods", "-n", "kube-system", "-o", "name")
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(ContainSubstring("pod/kube-apiserver-" + connEnv + "-" + source + "-control-plane"))
			out, err = docker("exec", node, "kubectl", "--kubeconfig", path, "auth", "can-i", "list", "secrets", "--all-namespaces")
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(strings.TrimSpace(out)).To(Equal("yes"))
			out, _ = docker("exec", node, "kubectl", "--kubeconfig", path, "auth", "can-i", "create", "pods")
			Expect(strings.TrimSpace(out)).To(HavePrefix("no"), "the reader must not write")
		}
	})

	It("prints the installed secret with remote-secret, and names the known clusters for an unknown one", func(ctx SpecContext) {
		installed, err := mesh().Cluster("cluster2").Kube.CoreV1().Secrets("istio-system").Get(ctx, "istio-remote-secret-cluster1", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		for _, format := range []string{"yaml", "json"} {
			out := meshctl("remote-secret", "--env", connEnv, "cluster1", "-o", format)
			var printed corev1.Secret
			// One document: istioctl's trailing "---" goes.
			Expect(yaml.Unmarshal([]byte(strings.TrimSuffix(out, "---\n")), &printed)).To(Succeed(), out)
			Expect(printed.Name).To(Equal("istio-remote-secret-cluster1"))
			Expect(printed.StringData["cluster1"]).To(Equal(string(installed.Data["cluster1"])), format)
		}
		_, errOut, err := meshctlResult("remote-secret", "--env", connEnv, "cluster9")
		Expect(err).To(HaveOccurred())
		Expect(errOut).To(ContainSubstring(`no cluster "cluster9" in environment "` + connEnv + `" (it has cluster1, cluster2)`))
	})

	It("changes nothing and makes no second token when connect runs again", func(ctx SpecContext) {
		var out struct {
			RemoteSecrets *remotesecret.Result `json:"remoteSecrets"`
		}
		meshctlJSON(&out, "connect", "--env", connEnv)
		Expect(out.RemoteSecrets).NotTo(BeNil())
		for _, r := range out.RemoteSecrets.Readers {
			Expect(r.Action).To(Equal(remotesecret.TokenReused), r.Cluster)
		}
		Expect(out.RemoteSecrets.Secrets).To(HaveLen(2))
		for _, s := range out.RemoteSecrets.Secrets {
			Expect(s.Action).To(Equal(remotesecret.SecretUnchanged), s.Secret+" in "+s.Target)
		}
		mesh().ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
			list, err := c.Kube.CoreV1().Secrets("istio-system").List(ctx, metav1.ListOptions{FieldSelector: "type=kubernetes.io/service-account-token"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).To(HaveLen(1))
		})
	})

	It("proves pod and service connectivity between every pair, and cleans up", func(ctx SpecContext) {
		var res check.Result
		meshctlJSON(&res, "check", "connectivity", "--env", connEnv)
		Expect(res.OK).To(BeTrue(), "%+v", res.Probes)
		// Every pair, each path, in each family of the (dual-stack)
		// environment.
		var got, want []string
		for _, p := range res.Probes {
			Expect(p.Status).To(Equal(check.StatusOK), "%+v", p)
			got = append(got, p.From+"→"+p.To+" "+p.Path+" "+families([]string{p.Address})[0])
		}
		for _, pair := range []string{"cluster1→cluster1", "cluster1→cluster2", "cluster2→cluster1", "cluster2→cluster2"} {
			for _, path := range []string{"pod", "service"} {
				for _, fam := range []string{"IPv4", "IPv6"} {
					want = append(want, pair+" "+path+" "+fam)
				}
			}
		}
		Expect(got).To(ConsistOf(want))
		// No pod left; the namespace, being deleted, goes by itself.
		mesh().ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
			pods, err := c.Kube.CoreV1().Pods(check.DefaultNamespace).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods.Items).To(BeEmpty(), "pods left in %s", check.DefaultNamespace)
			g.Eventually(func() bool {
				_, err := c.Kube.CoreV1().Namespaces().Get(ctx, check.DefaultNamespace, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			}).WithTimeout(time.Minute).WithPolling(time.Second).Should(BeTrue(), "namespace %s is still there", check.DefaultNamespace)
		})
		out := meshctl("check", "connectivity", "--env", connEnv)
		Expect(out).To(MatchRegexp(`cluster1\s+cluster2\s+service\s+10\.255\.20\.\d+\s+ok`))
		Expect(out).To(MatchRegexp(`cluster1\s+cluster2\s+service\s+[0-9a-f]*:[0-9a-f:]+\s+ok`))
	})
}
