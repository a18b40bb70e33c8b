package meshtest_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/pkg/meshtest"
)

// A suite's whole setup: two clusters made once for all parallel processes,
// artifacts on failure, and a spec that sends traffic across clusters. In a
// suite these calls sit at the top level, as `var _ = ...`.
func Example() {
	var env *meshtest.Env
	SynchronizedBeforeSuite(meshtest.SynchronizedSetup(&env, meshtest.WithClusters(2)))
	meshtest.ReportFailures(&env)

	Describe("two clusters on one network", func() {
		It("route pods and services to each other", func(ctx SpecContext) {
			ns := env.CreateNamespace(ctx, "echo-", nil)
			echo := env.DeployEcho(ctx, ns, "echo")
			from, to := echo.In("cluster1"), echo.In("cluster2")
			Eventually(from).WithTimeout(time.Minute).Should(meshtest.Reach(to.PodTarget()))
			Eventually(from).WithTimeout(time.Minute).Should(meshtest.Reach(to.ServiceTarget()))
		})

		It("reads every cluster at once", func(ctx SpecContext) {
			env.ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
				_, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
				g.Expect(err).NotTo(HaveOccurred())
			})
		})
	})
}
