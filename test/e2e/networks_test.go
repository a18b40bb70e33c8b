package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/meshctl/meshctl/pkg/connect/check"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// The dataplane on two networks: no routes between the clusters, only each
// network's east-west gateway — meshctl's proxy in its gateway mode behind
// the istio-eastwestgateway LoadBalancer Service. An ambient pod's call to
// a Service whose endpoints are all on the other network goes as ztunnel's
// double HBONE: an outer tunnel to that network's gateway, naming the
// service, and inside it a tunnel, end to end with the endpoint's node
// proxy, that the gateway forwards unread.
//
// networkSpecs run on the east-west gateway container's first environment
// (two clusters, two networks, connected with --install=false) after its
// gateway specs: the first installs the dataplane there with the CLI, as a
// user would, in place of the stand-in gateway pods those specs left.
func networkSpecs(envName string, meshFn func() *meshtest.Env) {
	var mesh *meshtest.Env
	It("installs the dataplane on the two networks, its gateway in place of the stand-in", func(ctx SpecContext) {
		mesh = meshFn()
		mesh.ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
			err := c.Kube.CoreV1().Pods(gateway.GatewayNamespace).Delete(ctx, "fake-eastwestgateway", metav1.DeleteOptions{})
			g.Expect(err == nil || apierrors.IsNotFound(err)).To(BeTrue(), "deleting the stand-in gateway: %v", err)
		})
		var out installOutput
		meshctlJSON(&out, "install", "--env", envName)
		Expect(releaseActions(&out)).To(HaveLen(4))
	})

	// remoteOnly deploys an echo everywhere and deletes cluster1's pods:
	// cluster1 keeps the Service (its ClusterIP and DNS name), the
	// endpoints are on cluster2's network only.
	remoteOnly := func(ctx context.Context, ns string) *meshtest.Echo {
		GinkgoHelper()
		svc := mesh.DeployEcho(ctx, ns, "svc")
		local := svc.In("cluster1")
		Expect(local.Cluster.Kube.AppsV1().Deployments(ns).Delete(ctx, "svc", metav1.DeleteOptions{})).To(Succeed())
		Eventually(func(g Gomega) {
			pods, err := local.Cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=svc"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		return local
	}
	fromCluster2 := func(t meshtest.Target) meshtest.Target {
		t.Expect = "meshtest-echo cluster=cluster2 "
		return t
	}

	It("runs the east-west gateway Ready behind istio-eastwestgateway in each cluster, with a load-balancer address on 15008", func(ctx SpecContext) {
		mesh.ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
			// What it waited for, if it waited (install already waits for
			// the gateway's pods; the spec took 18 s in a full run, not
			// reproduced alone).
			start, polls, stage, waited := time.Now(), 0, "", map[string]int{}
			defer func() {
				if polls > 1 {
					GinkgoWriter.Printf("%s: gateway checks passed after %d polls, %s; polls that failed, by check: %v\n",
						c.Name, polls, time.Since(start).Round(100*time.Millisecond), waited)
				}
			}()
			g.Eventually(func(g Gomega) {
				if polls++; polls > 1 {
					waited[stage]++ // the check the last poll failed at
				}
				stage = "deployment"
				dep, err := c.Kube.AppsV1().Deployments(gateway.GatewayNamespace).Get(ctx, gateway.GatewayName, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(dep.Status.ReadyReplicas).To(BeNumerically(">=", 1))
				stage = "service"
				svc, err := c.Kube.CoreV1().Services(gateway.GatewayNamespace).Get(ctx, gateway.GatewayName, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(svc.Status.LoadBalancer.Ingress).NotTo(BeEmpty())
				g.Expect(svc.Spec.Ports).To(ContainElement(HaveField("Port", BeEquivalentTo(gateway.PortHBONE))))
				stage = "pods"
				pods, err := c.Kube.CoreV1().Pods(gateway.GatewayNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=istio-eastwestgateway"})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pods.Items).NotTo(BeEmpty())
				g.Expect(pods.Items[0].Spec.ServiceAccountName).To(Equal("istio-eastwestgateway"), "pod %s", pods.Items[0].Name)
			}).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(Succeed(), "cluster %s", c.Name)
		})
	})

	It("carries an ambient pod's call to a Service whose endpoints are only on the other network through that network's gateway, by ClusterIP and by DNS name", func(ctx SpecContext) {
		ns := mesh.CreateNamespace(ctx, "xnet-", map[string]string{"istio.io/dataplane-mode": "ambient"})
		client := mesh.DeployEcho(ctx, ns, "client").In("cluster1")
		local := remoteOnly(ctx, ns)
		proxy := proxyOf(ctx, client)
		gw := gatewayPod(ctx, mesh.Cluster("cluster2"))
		before := hboneOpened(ctx, proxy)
		viaBefore := counterSum(ctx, proxy.cluster, proxy.pod, "meshctl_proxy_outbound_network_gateway_total", `network="network-2"`, `result="ok"`)
		fwdBefore := counterSum(ctx, gw.cluster, gw.pod, "meshctl_gateway_tunnels_total", `result="forwarded"`)

		byIP := fromCluster2(local.ServiceTarget())
		byName := fromCluster2(meshtest.Address("svc."+ns+".svc.cluster.local", meshtest.EchoServicePort))
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(byIP))
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(byName))

		after := hboneOpened(ctx, proxy)
		Expect(after["outbound"]).To(BeNumerically(">=", before["outbound"]+2), "%s: the calls were not tunnelled", proxy)
		Expect(after["outbound_passthrough"]).To(Equal(before["outbound_passthrough"]), "%s: a call went in plaintext", proxy)
		// The client's proxy counts a connection when it ends.
		Eventually(func() float64 {
			return counterSum(ctx, proxy.cluster, proxy.pod, "meshctl_proxy_outbound_network_gateway_total", `network="network-2"`, `result="ok"`)
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(time.Second).
			Should(BeNumerically(">=", viaBefore+2), "%s: the calls did not go through network-2's gateway", proxy)
		Expect(counterSum(ctx, gw.cluster, gw.pod, "meshctl_gateway_tunnels_total", `result="forwarded"`)).
			To(BeNumerically(">=", fwdBefore+2), "%s: the gateway forwarded no tunnel", gw)
	})

	It("lets the other network's policy judge the client's own identity: a DENY for its namespace in cluster2 blocks the call through the gateway", func(ctx SpecContext) {
		ensureIstioSecurityCRDs(ctx, mesh)
		ns := mesh.CreateNamespace(ctx, "xnet-authz-", map[string]string{"istio.io/dataplane-mode": "ambient"})
		client := mesh.DeployEcho(ctx, ns, "client").In("cluster1")
		target := fromCluster2(remoteOnly(ctx, ns).ServiceTarget())
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(target))

		c2 := mesh.Cluster("cluster2")
		dc, err := dynamic.NewForConfig(c2.Config)
		Expect(err).NotTo(HaveOccurred())
		// The gateway's own identity is in istio-system: were the inner
		// tunnel not end to end, this policy would not match and the call
		// would pass.
		c2.Apply(ctx, ns, `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-client}
spec:
  action: DENY
  rules:
  - from:
    - source: {principals: ["cluster.local/ns/`+ns+`/sa/default"]}
`)
		DeferCleanup(func(ctx SpecContext) {
			err := dc.Resource(authorizationPolicies).Namespace(ns).Delete(ctx, "deny-client", metav1.DeleteOptions{})
			if !apierrors.IsNotFound(err) {
				Expect(err).NotTo(HaveOccurred())
			}
		})
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).ShouldNot(meshtest.Reach(target))
		Expect(dc.Resource(authorizationPolicies).Namespace(ns).Delete(ctx, "deny-client", metav1.DeleteOptions{})).To(Succeed())
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(target))
	})

	It("passes meshctl check connectivity --meshed, every cross-network pair tested over HBONE through the other network's gateway", func(ctx SpecContext) {
		out, errOut, err := meshctlResult("check", "connectivity", "--env", mesh.Name(), "--meshed", "--image", suite.testImage, "--timeout", "5m", "-o", "json")
		Expect(err).NotTo(HaveOccurred(), "check connectivity --meshed failed:\n%s\n%s", out, errOut)
		var res check.Result
		Expect(json.Unmarshal([]byte(out), &res)).To(Succeed(), out+errOut)
		Expect(res.OK).To(BeTrue(), "%+v", res.Probes)
		Expect(res.Meshed).To(BeTrue())
		var cross []string
		for _, p := range res.Probes {
			Expect(p.Status).To(Equal(check.StatusOK), "%+v", p)
			Expect(p.Mesh).NotTo(BeNil(), "%+v", p)
			Expect(p.Mesh.HBONE).To(BeTrue(), "%+v", p)
			Expect(p.Mesh.ServerIdentity).To(HaveSuffix("/ns/"+check.DefaultNamespace+"/sa/"+check.ServerServiceAccount), "%+v", p)
			Expect(p.Mesh.ClientIdentity).To(HaveSuffix("/ns/"+check.DefaultNamespace+"/sa/"+check.ClientServiceAccount), "%+v", p)
			if p.From == p.To {
				continue
			}
			// The two clusters are on two networks: no pair is left
			// untested, each goes by the client's VIP through a gateway.
			Expect(p.Path).To(Equal(check.PathGateway), "%+v", p)
			Expect(p.Address).NotTo(BeEmpty(), "%+v", p)
			Expect(p.Mesh.Gateway).To(HaveSuffix(":"+strconv.Itoa(gateway.PortHBONE)), "%+v", p)
			cross = append(cross, p.From+"→"+p.To)
		}
		Expect(cross).To(ContainElements("cluster1→cluster2", "cluster2→cluster1"))
	})

	It("refuses, and counts, a call to the other network while its gateway has no ready pod", func(ctx SpecContext) {
		ns := mesh.CreateNamespace(ctx, "xnet-nogw-", map[string]string{"istio.io/dataplane-mode": "ambient"})
		client := mesh.DeployEcho(ctx, ns, "client").In("cluster1")
		target := fromCluster2(remoteOnly(ctx, ns).ServiceTarget())
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(target))
		proxy := proxyOf(ctx, client)
		refusedBefore := counterSum(ctx, proxy.cluster, proxy.pod, "meshctl_proxy_outbound_refused_total", `reason="no_network_gateway"`)

		c2 := mesh.Cluster("cluster2")
		scale := func(ctx context.Context, n int32) { // the cleanup's own ctx: the spec's ends first
			GinkgoHelper()
			// A patch, not GetScale then UpdateScale: the deployment
			// controller writes the deployment's status meanwhile, and an
			// update of the version read then fails with a conflict (it did
			// in CI, and in 1 of 10 scale cycles here).
			patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
			_, err := c2.Kube.AppsV1().Deployments(gateway.GatewayNamespace).Patch(ctx, gateway.GatewayName, types.MergePatchType, patch, metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
		scale(ctx, 0)
		DeferCleanup(func(ctx SpecContext) {
			scale(ctx, 1)
			Eventually(client).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(2*time.Second).Should(meshtest.Reach(target),
				func() string { return gatewayDiagnosis(ctx, c2, proxy) })
		})
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).ShouldNot(meshtest.Reach(target))
		// The first call to fail may still have been sent to the gateway's
		// address: cluster2's watch tells the proxy its pod is gone a
		// moment after the pod stops answering (it did so once in a full
		// run). Once it knows, every call is refused and counted.
		Eventually(func(g Gomega) {
			g.Expect(client).NotTo(meshtest.Reach(target))
			g.Expect(counterSum(ctx, proxy.cluster, proxy.pod, "meshctl_proxy_outbound_refused_total", `reason="no_network_gateway"`)).
				To(BeNumerically(">", refusedBefore), "%s: the refusal was not counted", proxy)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(2*time.Second).Should(Succeed(),
			func() string { return gatewayDiagnosis(ctx, c2, proxy) })
	})
}

// gatewayDiagnosis says, for a failure message, what the gateway of c
// and the client's node proxy show: its pods, and the proxy's counters of
// refused and gateway-bound tunnels.
func gatewayDiagnosis(ctx context.Context, c *meshtest.Cluster, client nodeProxy) string {
	var b strings.Builder
	pods, err := c.Kube.CoreV1().Pods(gateway.GatewayNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=istio-eastwestgateway"})
	if err != nil {
		fmt.Fprintf(&b, "gateway pods of %s: %v\n", c.Name, err)
	} else {
		for _, p := range pods.Items {
			ready := false
			for _, cond := range p.Status.Conditions {
				ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
			}
			fmt.Fprintf(&b, "gateway pod %s/%s: phase %s, ready %v, IP %s, deleting %v\n", c.Name, p.Name, p.Status.Phase, ready, p.Status.PodIP, p.DeletionTimestamp != nil)
		}
	}
	raw, err := client.cluster.Kube.CoreV1().Pods(gateway.GatewayNamespace).ProxyGet("http", client.pod, "15020", "/metrics", nil).DoRaw(ctx)
	if err != nil {
		fmt.Fprintf(&b, "metrics of %s: %v\n", client, err)
		return b.String()
	}
	for _, m := range sampleLine.FindAllStringSubmatch(string(raw), -1) {
		switch m[1] {
		case "meshctl_proxy_outbound_refused_total", "meshctl_proxy_outbound_network_gateway_total", "meshctl_hbone_h2_errors_total", "meshctl_hbone_handshake_failures_total":
			fmt.Fprintf(&b, "%s: %s\n", client, m[0])
		}
	}
	return b.String()
}

// gatewayPod is a Ready east-west gateway pod of c, as a nodeProxy (its
// metrics are on 15020 too).
func gatewayPod(ctx context.Context, c *meshtest.Cluster) nodeProxy {
	GinkgoHelper()
	var name string
	Eventually(func(g Gomega) {
		pods, err := c.Kube.CoreV1().Pods(gateway.GatewayNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=istio-eastwestgateway"})
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					name = p.Name
				}
			}
		}
		g.Expect(name).NotTo(BeEmpty(), "no Ready gateway pod in %s", c.Name)
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return nodeProxy{cluster: c, pod: name}
}

var sampleLine = regexp.MustCompile(`(?m)^([a-z_]+)\{([^}]*)\} (\S+)$`)

// counterSum sums the samples of metric name whose labels contain every
// label given (`key="value"`), read from pod's 15020 in istio-system
// through the API server's pod proxy.
func counterSum(ctx context.Context, c *meshtest.Cluster, pod, name string, labels ...string) float64 {
	GinkgoHelper()
	raw, err := c.Kube.CoreV1().Pods(gateway.GatewayNamespace).ProxyGet("http", pod, "15020", "/metrics", nil).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred(), "metrics of %s/%s", c.Name, pod)
	var sum float64
samples:
	for _, m := range sampleLine.FindAllStringSubmatch(string(raw), -1) {
		if m[1] != name {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(m[2], l) {
				continue samples
			}
		}
		v, err := strconv.ParseFloat(m[3], 64)
		Expect(err).NotTo(HaveOccurred(), "metrics of %s/%s: %s", c.Name, pod, m[0])
		sum += v
	}
	GinkgoWriter.Printf("%s/%s: %s{%s} %v\n", c.Name, pod, name, strings.Join(labels, ","), sum)
	return sum
}
