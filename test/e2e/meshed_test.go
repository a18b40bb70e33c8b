package e2e

import (
	"context"
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/meshctl/meshctl/pkg/connect/check"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// istioSecurityCRDs are minimal CRDs for the kinds the node proxy enforces,
// for an environment without Istio's base chart: the proxy only needs the
// API to be served.
const istioSecurityCRDs = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: authorizationpolicies.security.istio.io}
spec:
  group: security.istio.io
  scope: Namespaced
  names: {kind: AuthorizationPolicy, plural: authorizationpolicies, singular: authorizationpolicy, listKind: AuthorizationPolicyList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: peerauthentications.security.istio.io}
spec:
  group: security.istio.io
  scope: Namespaced
  names: {kind: PeerAuthentication, plural: peerauthentications, singular: peerauthentication, listKind: PeerAuthenticationList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

var (
	authorizationPolicies = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
	peerAuthentications   = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}
)

// ensureIstioSecurityCRDs applies the minimal CRDs in every cluster that
// does not serve them yet (Istio's own, if installed, are left alone).
func ensureIstioSecurityCRDs(ctx context.Context, m *meshtest.Env) {
	GinkgoHelper()
	for _, c := range m.Clusters() {
		dc, err := dynamic.NewForConfig(c.Config)
		Expect(err).NotTo(HaveOccurred())
		_, err = dc.Resource(customResourceDefinitions).Get(ctx, authorizationPolicies.GroupResource().String(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			c.Apply(ctx, "", istioSecurityCRDs)
			continue
		}
		Expect(err).NotTo(HaveOccurred(), "cluster %s", c.Name)
	}
}

var customResourceDefinitions = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// removeIstioSecurityCRDs deletes the minimal CRDs ensureIstioSecurityCRDs
// applied (not Helm's: those carry app.kubernetes.io/managed-by=Helm) and
// waits until they are gone: Istio's base chart refuses to install over
// CRDs no Helm release owns.
func removeIstioSecurityCRDs(ctx context.Context, m *meshtest.Env) {
	GinkgoHelper()
	for _, c := range m.Clusters() {
		dc, err := dynamic.NewForConfig(c.Config)
		Expect(err).NotTo(HaveOccurred())
		crds := dc.Resource(customResourceDefinitions)
		for _, r := range []schema.GroupVersionResource{authorizationPolicies, peerAuthentications} {
			name := r.GroupResource().String() // the CRD's name
			crd, err := crds.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			Expect(err).NotTo(HaveOccurred(), "cluster %s: CRD %s", c.Name, name)
			if crd.GetLabels()["app.kubernetes.io/managed-by"] == "Helm" {
				continue
			}
			if err := crds.Delete(ctx, name, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
				Expect(err).NotTo(HaveOccurred(), "cluster %s: deleting CRD %s", c.Name, name)
			}
			Eventually(func() bool {
				_, err := crds.Get(ctx, name, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(BeTrue(), "cluster %s: CRD %s is not gone", c.Name, name)
		}
	}
}

// meshedServiceSpecs: the node proxy's service model, secure naming and
// L4 policy on a dataplane-installed two-cluster environment (the install
// container's). Each spec makes its own namespaces and removes the
// policies it creates.
func meshedServiceSpecs(mesh func() *meshtest.Env) {
	// deployRemoteOnly deploys an echo everywhere and deletes cluster1's
	// pods: cluster1 keeps the Service, its endpoints are in cluster2 only.
	deployRemoteOnly := func(ctx context.Context, m *meshtest.Env, ns string) (local, remote *meshtest.Echo) {
		GinkgoHelper()
		svc := m.DeployEcho(ctx, ns, "svc")
		local, remote = svc.In("cluster1"), svc.In("cluster2")
		Expect(local.Cluster.Kube.AppsV1().Deployments(ns).Delete(ctx, "svc", metav1.DeleteOptions{})).To(Succeed())
		Eventually(func(g Gomega) {
			pods, err := local.Cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=svc"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		return local, remote
	}
	fromCluster2 := func(t meshtest.Target) meshtest.Target {
		t.Expect = "meshtest-echo cluster=cluster2 "
		return t
	}

	It("carries ambient pods' calls to a Service whose endpoints are only in the other cluster over HBONE, by ClusterIP and by DNS name", func(ctx SpecContext) {
		m := mesh()
		ns := m.CreateNamespace(ctx, "svc-x-", map[string]string{"istio.io/dataplane-mode": "ambient"})
		client := m.DeployEcho(ctx, ns, "client").In("cluster1")
		local, _ := deployRemoteOnly(ctx, m, ns)
		proxy := proxyOf(ctx, client)
		before := hboneOpened(ctx, proxy)
		byIP := fromCluster2(local.ServiceTarget())
		byName := fromCluster2(meshtest.Address("svc."+ns+".svc.cluster.local", meshtest.EchoServicePort))
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(byIP))
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(byName))
		after := hboneOpened(ctx, proxy)
		Expect(after["outbound"]).To(BeNumerically(">=", before["outbound"]+2), "%s: the calls were not tunnelled", proxy)
		Expect(after["outbound_passthrough"]).To(Equal(before["outbound_passthrough"]), "%s: a call went in plaintext", proxy)
	})

	It("enforces a DENY AuthorizationPolicy in the server's cluster, and lets the call through once it is deleted", func(ctx SpecContext) {
		m := mesh()
		ensureIstioSecurityCRDs(ctx, m)
		ns := m.CreateNamespace(ctx, "authz-", map[string]string{"istio.io/dataplane-mode": "ambient"})
		client := m.DeployEcho(ctx, ns, "client").In("cluster1")
		local, _ := deployRemoteOnly(ctx, m, ns)
		target := fromCluster2(local.ServiceTarget())
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(target))

		c2 := m.Clusters()[1]
		dc, err := dynamic.NewForConfig(c2.Config)
		Expect(err).NotTo(HaveOccurred())
		c2.Apply(ctx, ns, `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-same-namespace}
spec:
  action: DENY
  rules:
  - from:
    - source: {namespaces: [`+ns+`]}
`)
		DeferCleanup(func(ctx SpecContext) {
			err := dc.Resource(authorizationPolicies).Namespace(ns).Delete(ctx, "deny-same-namespace", metav1.DeleteOptions{})
			if !apierrors.IsNotFound(err) {
				Expect(err).NotTo(HaveOccurred())
			}
		})
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).ShouldNot(meshtest.Reach(target))
		Expect(dc.Resource(authorizationPolicies).Namespace(ns).Delete(ctx, "deny-same-namespace", metav1.DeleteOptions{})).To(Succeed())
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(target))
	})

	It("under PeerAuthentication STRICT refuses a non-meshed pod's plaintext to a meshed server, and still lets a meshed client in", func(ctx SpecContext) {
		m := mesh()
		ensureIstioSecurityCRDs(ctx, m)
		meshed := m.CreateNamespace(ctx, "strict-", map[string]string{"istio.io/dataplane-mode": "ambient"})
		plain := m.CreateNamespace(ctx, "strict-plain-", nil)
		server := m.DeployEcho(ctx, meshed, "server").In("cluster2")
		client := m.DeployEcho(ctx, meshed, "client").In("cluster1")
		outsider := m.DeployEcho(ctx, plain, "outsider").In("cluster2")
		Eventually(outsider).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(server.PodTarget()))

		c2 := m.Clusters()[1]
		dc, err := dynamic.NewForConfig(c2.Config)
		Expect(err).NotTo(HaveOccurred())
		c2.Apply(ctx, "istio-system", `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default}
spec:
  mtls: {mode: STRICT}
`)
		DeferCleanup(func(ctx SpecContext) {
			err := dc.Resource(peerAuthentications).Namespace("istio-system").Delete(ctx, "default", metav1.DeleteOptions{})
			if !apierrors.IsNotFound(err) {
				Expect(err).NotTo(HaveOccurred())
			}
		})
		Eventually(outsider).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).ShouldNot(meshtest.Reach(server.PodTarget()))
		Eventually(client).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(meshtest.Reach(server.PodTarget()))
	})

	It("passes meshctl check connectivity --meshed, with HBONE and both identities for every pair", func(ctx SpecContext) {
		out, errOut, err := meshctlResult("check", "connectivity", "--env", mesh().Name(), "--meshed", "--image", suite.testImage, "--timeout", "5m", "-o", "json")
		Expect(err).NotTo(HaveOccurred(), "check connectivity --meshed failed:\n%s\n%s", out, errOut)
		var res check.Result
		Expect(json.Unmarshal([]byte(out), &res)).To(Succeed(), out+errOut)
		Expect(res.OK).To(BeTrue(), "%+v", res.Probes)
		Expect(res.Meshed).To(BeTrue())
		var got []string
		for _, p := range res.Probes {
			Expect(p.Status).To(Equal(check.StatusOK), "%+v", p)
			Expect(p.Mesh).NotTo(BeNil(), "%+v", p)
			Expect(p.Mesh.HBONE).To(BeTrue(), "%+v", p)
			Expect(p.Mesh.ServerIdentity).To(HaveSuffix("/ns/"+check.DefaultNamespace+"/sa/"+check.ServerServiceAccount), "%+v", p)
			Expect(p.Mesh.ClientIdentity).To(HaveSuffix("/ns/"+check.DefaultNamespace+"/sa/"+check.ClientServiceAccount), "%+v", p)
			got = append(got, p.From+"→"+p.To+" "+p.Path)
		}
		Expect(got).To(ContainElements("cluster1→cluster2 pod", "cluster1→cluster2 service", "cluster2→cluster1 pod", "cluster2→cluster1 service"))
	})
}
