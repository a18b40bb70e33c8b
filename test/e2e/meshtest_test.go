package e2e

import (
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/pkg/meshtest"
)

// meshtestSpecs: the meshtest framework itself — its handles on the
// clusters, its echo deployments and reachability checks, the message and
// the artifacts of a failed check, commands in pods, reuse — on the
// environment meshtest.Setup made for the install container (name). A
// container of their own cost two more kind clusters and a registry, for
// nothing those do not show; Setup's creating an environment from nothing is
// what the install container's BeforeAll does.
func meshtestSpecs(name string, envOf func() *meshtest.Env) {
	Describe("the meshtest framework", func() {
		var mesh *meshtest.Env
		var echo meshtest.Echoes
		var ns string

		BeforeAll(func(ctx SpecContext) {
			mesh = envOf()
			// In BeforeAll, the namespace lives until this container's
			// last spec.
			ns = mesh.CreateNamespace(ctx, "echo-", nil)
			echo = mesh.DeployEcho(ctx, ns, "echo")
		})

		It("creates two clusters on one network, with clients for each", func(ctx SpecContext) {
			Expect(mesh.Name()).To(Equal(name))
			Expect(mesh.Clusters()).To(HaveLen(2))
			Expect(mesh.Primaries()).To(HaveLen(2))
			mesh.ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
				g.Expect(c.KindName).To(Equal(name + "-" + c.Name))
				g.Expect(c.Network).To(Equal("network-1"))
				nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(nodes.Items).To(HaveLen(1))
				// up's flow ran: the shared root CA is there.
				_, err = c.Kube.CoreV1().Secrets("istio-system").Get(ctx, "cacerts", metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
			})
		})

		It("routes pod to pod and pod to service across the clusters (same-network routes)", func() {
			Expect(echo).To(HaveLen(2))
			for _, e := range echo {
				Expect(e.PodIP).NotTo(BeEmpty())
				Expect(e.ServiceIP).NotTo(BeEmpty())
			}
			from, to := echo.In("cluster1"), echo.In("cluster2")
			Eventually(from).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(to.PodTarget()))
			Eventually(from).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(to.ServiceTarget()))
			Eventually(to).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(from.PodTarget()))
			Eventually(to).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(from.ServiceTarget()))
		})

		It("explains a failed check, and saves artifacts for it", func(ctx SpecContext) {
			from, to := echo.In("cluster1"), echo.In("cluster2")
			failures := InterceptGomegaFailures(func() {
				Expect(from).To(meshtest.Reach(meshtest.Address(to.PodIP, 9)))
			})
			Expect(failures).To(HaveLen(1))
			Expect(failures[0]).To(HavePrefix("pod cluster1/" + ns + "/" + from.Pod + " could not reach " + to.PodIP + ":9: nc failed (exit code 1)"))
			// The answer must come from the pod asked for, not just anyone.
			wrong := to.PodTarget()
			wrong.Expect = "meshtest-echo cluster=cluster3"
			failures = InterceptGomegaFailures(func() { Expect(from).To(meshtest.Reach(wrong)) })
			Expect(failures).To(ConsistOf(ContainSubstring("something answered, but not it")))

			dir := filepath.Join(GinkgoT().TempDir(), "artifacts")
			Expect(mesh.CollectArtifacts(ctx, dir)).To(Succeed())
			for _, c := range echo {
				base := filepath.Join(dir, c.Cluster.Name)
				Expect(filepath.Join(base, "nodes.yaml")).To(BeARegularFile())
				Expect(os.ReadFile(filepath.Join(base, "pods.txt"))).To(ContainSubstring(c.Pod))
				Expect(os.ReadFile(filepath.Join(base, "events.txt"))).To(ContainSubstring("pod/" + c.Pod))
				Expect(os.ReadFile(filepath.Join(base, "logs", ns, c.Pod, "echo.log"))).NotTo(BeNil())
				Expect(filepath.Join(base, "logs", "kube-system")).To(BeADirectory())
			}
			Expect(os.ReadFile(filepath.Join(dir, "status.json"))).To(ContainSubstring(`"ready": true`))
		})

		It("runs commands in pods", func(ctx SpecContext) {
			out, _, err := echo.In("cluster2").Exec(ctx, "sh", "-c", "cat /www/index.html")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(Equal("meshtest-echo cluster=cluster2 pod=" + echo.In("cluster2").Pod + "\n"))
			_, _, err = echo.In("cluster2").Exec(ctx, "sh", "-c", "exit 3")
			var exit *meshtest.ExitError
			Expect(err).To(BeAssignableToTypeOf(exit))
			Expect(err.(*meshtest.ExitError).Code).To(Equal(3))
		})

		It("reuses the environment it made, and refuses one that does not match", func(ctx SpecContext) {
			reused, err := meshtest.New(ctx, meshtest.WithEnv(name), meshtest.WithReuse(true), meshtest.WithClusters(2),
				meshtest.WithArtifacts(filepath.Join(GinkgoT().TempDir(), "reuse")))
			Expect(err).NotTo(HaveOccurred())
			Expect(reused.Clusters()).To(HaveLen(2))
			_, err = reused.Cluster("cluster1").Kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(reused.Close(ctx)).To(Succeed()) // a reused environment is left alone
			Expect(mesh.Cluster("cluster2").Kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})).NotTo(BeNil())

			_, err = meshtest.New(ctx, meshtest.WithEnv(name), meshtest.WithReuse(true), meshtest.WithClusters(3), meshtest.WithNetworks(2))
			Expect(err).To(MatchError(And(
				ContainSubstring(`-meshtest.reuse: environment "`+name+`" does not match the topology`),
				ContainSubstring("it has 2 cluster(s) (cluster1, cluster2), the topology wants 3 (cluster1, cluster2, cluster3)"),
				ContainSubstring(`cluster "cluster2": network "network-1", the topology wants "network-2"`),
				ContainSubstring(`cluster "cluster3": missing`),
			)))
		})
	})
}
