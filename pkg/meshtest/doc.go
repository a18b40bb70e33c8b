// Package meshtest is a Ginkgo/Gomega framework for multi-cluster suites: it
// gives a suite its clusters — made through the same library as
// `meshctl up`, or reused from an environment `meshctl up` already made — with
// clients for each, helpers that act in every cluster at once, matchers for
// traffic between clusters, and artifacts when something fails.
//
// # A suite
//
//	package e2e
//
//	import (
//		"testing"
//		"time"
//
//		. "github.com/onsi/ginkgo/v2"
//		. "github.com/onsi/gomega"
//
//		"github.com/meshctl/meshctl/pkg/meshtest"
//	)
//
//	func TestE2E(t *testing.T) {
//		RegisterFailHandler(Fail)
//		RunSpecs(t, "mesh e2e")
//	}
//
//	var env *meshtest.Env
//
//	// Made once (process 1 with ginkgo -p), shared by every process; deleted
//	// after the suite unless it was reused or -meshtest.keep.
//	var _ = SynchronizedBeforeSuite(meshtest.SynchronizedSetup(&env, meshtest.WithClusters(2)))
//
//	// Artifacts of every failed spec under <artifacts>/<env>/failures/.
//	var _ = meshtest.ReportFailures(&env)
//
//	var _ = Describe("two clusters on one network", func() {
//		It("route pods and services to each other", func(ctx SpecContext) {
//			ns := env.CreateNamespace(ctx, "echo-", nil) // deleted at cleanup
//			echo := env.DeployEcho(ctx, ns, "echo")     // in every cluster at once
//			from, to := echo.In("cluster1"), echo.In("cluster2")
//			Eventually(from).WithTimeout(time.Minute).Should(meshtest.Reach(to.PodTarget()))
//			Eventually(from).WithTimeout(time.Minute).Should(meshtest.Reach(to.ServiceTarget()))
//		})
//
//		It("reads every cluster", func(ctx SpecContext) {
//			env.ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
//				_, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
//				g.Expect(err).NotTo(HaveOccurred())
//			})
//		})
//	})
//
// Outside SynchronizedBeforeSuite — in an Ordered container's BeforeAll, or
// a BeforeSuite of a suite that never runs in parallel — meshtest.Setup(ctx,
// options...) makes the environment and registers its deletion.
//
// # Settings
//
// Options in the suite's code say what it needs. Each can be overridden, for
// a run, by a flag (registered on flag.CommandLine when the package is
// imported, so `go test ./e2e/... -meshtest.reuse` works) or, below the
// flag, by an environment variable for CI:
//
//	-meshtest.topology FILE    MESHTEST_TOPOLOGY      Istio's topology file (JSON array, or YAML)
//	-meshtest.clusters N       MESHTEST_CLUSTERS      N clusters named cluster1..N (no topology)
//	-meshtest.networks N       MESHTEST_NETWORKS      spread them over N networks
//	-meshtest.env NAME         MESHTEST_ENV           meshctl environment (default "default")
//	-meshtest.image IMAGE      MESHTEST_IMAGE         kind node image
//	-meshtest.artifacts DIR    MESHTEST_ARTIFACTS     kubeconfigs, CA files, failure artifacts (default _artifacts)
//	-meshtest.reuse            MESHTEST_REUSE         use the environment `meshctl up` made
//	-meshtest.keep             MESHTEST_KEEP          keep the clusters this run created
//	-meshtest.registry         MESHTEST_REGISTRY      a local registry, as meshctl up (also -registry-name/-port/-image)
//	-meshtest.echo-image IMAGE MESHTEST_ECHO_IMAGE    DeployEcho's image (default meshctl/busybox:latest)
//	-meshtest.wait DURATION    MESHTEST_WAIT          wait for each control plane to be Ready
//
// # Creating and reusing
//
// Without -meshtest.reuse, the environment is made as `meshctl up` makes it:
// clusters created in parallel (or reused when they already exist exactly as
// planned), routes between the clusters of each network, and each
// cluster's intermediate of a shared root CA as istio-system/cacerts. The
// suite deletes, at its end, what it created.
//
// With -meshtest.reuse, the clusters are those `meshctl up` made (found by
// meshctl's record in each cluster), their kubeconfigs read from the
// clusters. When the suite states a topology (a file, or a cluster count)
// the environment must match it — cluster names, count, networks, primary
// and config clusters — or the suite fails in its setup with one message
// listing every difference. Reused clusters are never deleted.
//
// # Failures
//
// ReportFailures saves, for each failed spec, CollectArtifacts' output —
// each cluster's pods, pod logs, events and nodes, and the environment's
// status — before the spec's cleanup runs. JUnit XML comes from Ginkgo:
// -ginkgo.junit-report=junit.xml.
//
// See docs/meshtest.md for a CI pipeline that runs such a suite.
package meshtest
