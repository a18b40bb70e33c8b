package meshtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// The helpers run in a Ginkgo suite, as users run them, against two real
// kube-apiservers (testenv) reached through the reuse path of a fake
// provider. There are no kubelets: DeployEcho, Exec and Reach are covered by
// the e2e suite on kind.
var (
	suiteProvider  = &fakeProvider{}
	suiteArtifacts = filepath.Join(os.TempDir(), fmt.Sprintf("meshtest-suite-%d", os.Getpid()))
	suiteEnv       *Env
)

func TestIntegrationHelpers(t *testing.T) {
	kcs := twoAPIServers(t)
	t.Cleanup(func() { os.RemoveAll(suiteArtifacts) })
	suiteProvider.dir = suiteArtifacts
	suiteProvider.env = "mt"
	suiteProvider.kubeconfigs = kcs
	plan, err := model.NewPlan(model.Request{Env: "mt", Clusters: 2})
	if err != nil {
		t.Fatal(err)
	}
	suiteProvider.clusters = plan.Clusters
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "meshtest helpers against real kube-apiservers")
}

// withProvider replaces the provider and ignores flags and MESHTEST_*.
func withProvider(p provider) Option {
	return func(o *options) { o.prov, o.isolated = p, true }
}

var _ = ginkgo.SynchronizedBeforeSuite(SynchronizedSetup(&suiteEnv,
	withProvider(suiteProvider), WithEnv("mt"), WithReuse(true), WithClusters(2), WithArtifacts(suiteArtifacts)))

var _ = ginkgo.Describe("an environment", func() {
	ginkgo.It("gives each cluster its name, network, roles and working clients", func(ctx ginkgo.SpecContext) {
		gomega.Expect(suiteEnv.Name()).To(gomega.Equal("mt"))
		cs := suiteEnv.Clusters()
		gomega.Expect(cs).To(gomega.HaveLen(2))
		gomega.Expect(suiteEnv.Primaries()).To(gomega.HaveLen(2))
		for i, c := range cs {
			gomega.Expect(c.Name).To(gomega.Equal(fmt.Sprintf("cluster%d", i+1)))
			gomega.Expect(c.KindName).To(gomega.Equal("mt-" + c.Name))
			gomega.Expect(c.Network).To(gomega.Equal("network-1"))
			gomega.Expect(c.Is(model.RolePrimary)).To(gomega.BeTrue())
			_, err := c.Kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			var ns corev1.Namespace
			gomega.Expect(c.Client.Get(ctx, client.ObjectKey{Name: "default"}, &ns)).To(gomega.Succeed())
		}
		gomega.Expect(suiteEnv.Cluster("cluster2")).To(gomega.BeIdenticalTo(cs[1]))
		gomega.Expect(suiteEnv.Cluster("mt-cluster1")).To(gomega.BeIdenticalTo(cs[0]))
	})
})

var _ = ginkgo.Describe("CreateNamespace", ginkgo.Ordered, func() {
	var name string

	ginkgo.It("creates the namespace in every cluster, with one generated name", func(ctx ginkgo.SpecContext) {
		name = suiteEnv.CreateNamespace(ctx, "echo-", map[string]string{"istio.io/dataplane-mode": "ambient"})
		gomega.Expect(name).To(gomega.MatchRegexp(`^echo-[0-9a-f]{6}$`))
		for _, c := range suiteEnv.Clusters() {
			ns, err := c.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), c.Name)
			gomega.Expect(ns.Labels).To(gomega.HaveKeyWithValue("istio.io/dataplane-mode", "ambient"))
		}
		_, err := suiteEnv.createNamespace(ctx, name, nil)
		gomega.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("cluster cluster1: namespace " + name + " already exists (left by an earlier run?")))
		gomega.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("cluster cluster2: namespace " + name + " already exists")))
	})

	ginkgo.It("talks to the clusters at the same time", func(ctx ginkgo.SpecContext) {
		// Each cluster's namespace POST waits for the other's to arrive: one
		// cluster after the other would time out here.
		arrived := make(chan struct{}, 2)
		barrier := func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/namespaces") {
					arrived <- struct{}{}
					deadline := time.After(10 * time.Second)
					for len(arrived) < 2 {
						select {
						case <-deadline:
							return nil, fmt.Errorf("the other cluster's request never came while this one waited")
						case <-time.After(10 * time.Millisecond):
						}
					}
				}
				return rt.RoundTrip(r)
			})
		}
		e := &Env{desc: suiteEnv.desc}
		for _, c := range suiteEnv.Clusters() {
			cfg := rest.CopyConfig(c.Config)
			cfg.WrapTransport = barrier
			wrapped, err := newClusterFromConfig(clusterDesc{Name: c.Name}, cfg)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			e.clusters = append(e.clusters, wrapped)
		}
		concurrent := e.CreateNamespace(ctx, "concurrent-", nil)
		gomega.Expect(arrived).To(gomega.HaveLen(2))
		for _, c := range suiteEnv.Clusters() {
			_, err := c.Kube.CoreV1().Namespaces().Get(ctx, concurrent, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), c.Name)
		}
	})

	ginkgo.It("deleted it from every cluster at cleanup", func(ctx ginkgo.SpecContext) {
		for _, c := range suiteEnv.Clusters() {
			ns, err := c.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			// No namespace controller here: deleted means terminating.
			gomega.Expect(ns.DeletionTimestamp).NotTo(gomega.BeNil(), c.Name)
		}
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := suiteEnv.createNamespace(short, name, nil)
		gomega.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("namespace " + name + " is still terminating")))
	})
})

const crdManifests = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.meshtest.example.com
spec:
  group: meshtest.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: meshtest.example.com/v1
kind: Widget
metadata: {name: w}
spec: {size: 3}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {mode: %s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: meshtest-reader}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get]}
---
`

var _ = ginkgo.Describe("Apply", func() {
	ginkgo.It("server-side applies CRDs, their objects, namespaced and cluster objects in every cluster", func(ctx ginkgo.SpecContext) {
		ns := suiteEnv.CreateNamespace(ctx, "apply-", nil)
		suiteEnv.Apply(ctx, ns, fmt.Sprintf(crdManifests, "first"))
		suiteEnv.Apply(ctx, ns, fmt.Sprintf(crdManifests, "second")) // idempotent, and updates
		widgets := schema.GroupVersionResource{Group: "meshtest.example.com", Version: "v1", Resource: "widgets"}
		for _, c := range suiteEnv.Clusters() {
			cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), c.Name)
			gomega.Expect(cm.Data).To(gomega.HaveKeyWithValue("mode", "second"))
			gomega.Expect(cm.ManagedFields).NotTo(gomega.BeEmpty())
			gomega.Expect(cm.ManagedFields[0].Manager).To(gomega.Equal(FieldManager))
			w, err := c.Dynamic.Resource(widgets).Namespace(ns).Get(ctx, "w", metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), c.Name)
			gomega.Expect(w.Object["spec"]).To(gomega.HaveKeyWithValue("size", gomega.BeNumerically("==", 3)))
			_, err = c.Kube.RbacV1().ClusterRoles().Get(ctx, "meshtest-reader", metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), c.Name)
		}
	})

	ginkgo.It("says which document and cluster is wrong", func(ctx ginkgo.SpecContext) {
		_, err := decodeManifests("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: ConfigMap\n")
		gomega.Expect(err).To(gomega.MatchError("manifests, document 2: apiVersion, kind and metadata.name are required"))
		objs, err := decodeManifests("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		err = suiteEnv.Cluster("cluster2").apply(ctx, "", objs)
		gomega.Expect(err).To(gomega.MatchError("cluster cluster2: ConfigMap a is namespaced, but neither it nor Apply names a namespace"))
	})
})

var _ = ginkgo.Describe("ForEachCluster", func() {
	ginkgo.It("runs in every cluster and reports each cluster's failure under its name", func(ctx ginkgo.SpecContext) {
		seen := make(chan string, 2)
		suiteEnv.ForEachCluster(func(g gomega.Gomega, c *Cluster) {
			_, err := c.Kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			seen <- c.Name
		})
		close(seen)
		var names []string
		for n := range seen {
			names = append(names, n)
		}
		gomega.Expect(names).To(gomega.ConsistOf("cluster1", "cluster2"))

		err := suiteEnv.forEach(func(g gomega.Gomega, c *Cluster) {
			g.Expect(c.Name).To(gomega.Equal("cluster0"))
		})
		gomega.Expect(err).To(gomega.MatchError(gomega.And(
			gomega.ContainSubstring("in cluster cluster1: Expected\n    <string>: cluster1\nto equal"),
			gomega.ContainSubstring("in cluster cluster2: Expected"))))
	})
})

var _ = ginkgo.Describe("CollectArtifacts", func() {
	ginkgo.It("writes the environment, its status and each cluster's nodes, pods and events", func(ctx ginkgo.SpecContext) {
		ns := suiteEnv.CreateNamespace(ctx, "artifacts-", nil)
		c2 := suiteEnv.Cluster("cluster2")
		_, err := c2.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "stuck"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nowhere/none:1"}}},
		}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		_, err = c2.Kube.CoreV1().Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "stuck.1"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "stuck"},
			Reason:         "FailedScheduling", Message: "0/0 nodes are available", Type: "Warning",
			LastTimestamp: metav1.Now(), Count: 1,
		}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())

		dir := filepath.Join(ginkgo.GinkgoT().TempDir(), "artifacts")
		gomega.Expect(suiteEnv.CollectArtifacts(ctx, dir)).To(gomega.Succeed())
		read := func(parts ...string) string {
			b, err := os.ReadFile(filepath.Join(append([]string{dir}, parts...)...))
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			return string(b)
		}
		gomega.Expect(read("env.json")).To(gomega.ContainSubstring(`"kindName": "mt-cluster2"`))
		gomega.Expect(read("status.json")).To(gomega.ContainSubstring(`"name": "mt-cluster1-control-plane"`))
		gomega.Expect(read("cluster1", "nodes.yaml")).To(gomega.ContainSubstring("kind: NodeList"))
		gomega.Expect(read("cluster2", "pods.txt")).To(gomega.MatchRegexp(ns + `\s+stuck\s+Pending\s+false`))
		gomega.Expect(read("cluster2", "events.txt")).To(gomega.MatchRegexp(`Warning\s+` + ns + `\s+pod/stuck\s+FailedScheduling\s+1\s+0/0 nodes are available`))
		gomega.Expect(read("cluster1", "pods.txt")).NotTo(gomega.ContainSubstring("stuck"))
	})

	ginkgo.It("names a failed spec's directory after the spec, uniquely", func() {
		r := ginkgo.CurrentSpecReport()
		first := suiteEnv.failureDir(r)
		second := suiteEnv.failureDir(r)
		gomega.Expect(first).To(gomega.HaveSuffix("/mt/failures/CollectArtifacts-names-a-failed-spec-s-directory-after-the-spec-uniquely"))
		gomega.Expect(second).To(gomega.Equal(first + "-2"))
		gomega.Expect(first).To(gomega.BeADirectory())
	})
})

var _ = ginkgo.Describe("the echo workload", func() {
	// No kubelet here: this checks the objects and the readiness report; the
	// e2e suite runs the pods.
	ginkgo.It("is a Deployment and a Service that say which cluster answers", func(ctx ginkgo.SpecContext) {
		ns := suiteEnv.CreateNamespace(ctx, "echo-", nil)
		c := suiteEnv.Cluster("cluster2")
		objs, err := decodeManifests(echoManifests(c.Name, "echo", "meshctl/busybox:latest"))
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(c.apply(ctx, ns, objs)).To(gomega.Succeed())
		dep, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, "echo", metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ctr := dep.Spec.Template.Spec.Containers[0]
		gomega.Expect(ctr.Image).To(gomega.Equal("meshctl/busybox:latest"))
		gomega.Expect(ctr.ImagePullPolicy).To(gomega.Equal(corev1.PullIfNotPresent))
		gomega.Expect(ctr.Env).To(gomega.ContainElement(corev1.EnvVar{Name: "CLUSTER", Value: "cluster2"}))
		gomega.Expect(ctr.Command[2]).To(gomega.ContainSubstring(`echo "meshtest-echo cluster=$CLUSTER pod=$(hostname)"`))
		gomega.Expect(ctr.Command[2]).To(gomega.HaveSuffix("exec httpd -f -p 8080 -h /www"))
		e := &Echo{Cluster: c, Namespace: ns, Name: "echo"}
		why, err := e.ready(ctx)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(why).To(gomega.Equal("no pod yet"))
		gomega.Expect(e.ServiceIP).To(gomega.HavePrefix("10.0.0."))
		svc, err := c.Kube.CoreV1().Services(ns).Get(ctx, "echo", metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(svc.Spec.Ports[0].Port).To(gomega.BeEquivalentTo(EchoServicePort))
		gomega.Expect(svc.Spec.Ports[0].TargetPort.IntValue()).To(gomega.Equal(EchoPort))
		// Both families where the cluster has both; this one has only IPv4.
		gomega.Expect(*svc.Spec.IPFamilyPolicy).To(gomega.Equal(corev1.IPFamilyPolicyPreferDualStack))
		gomega.Expect(e.ServiceIPs).To(gomega.Equal([]string{e.ServiceIP}))
	})
})

var _ = ginkgo.Describe("Reach", func() {
	ginkgo.It("refuses what it cannot send from, and explains a failure", func() {
		_, err := Reach(Address("10.0.0.1", 80)).Match("cluster1")
		gomega.Expect(err).To(gomega.MatchError("meshtest.Reach sends from a *meshtest.Echo (DeployEcho's), got string"))
		from := &Echo{Cluster: suiteEnv.Cluster("cluster1"), Namespace: "ns", Pod: "echo-1"}
		to := &Echo{Cluster: suiteEnv.Cluster("cluster2"), Namespace: "ns", Name: "echo", Pod: "echo-2", PodIP: "10.20.0.7", ServiceIP: "10.255.20.9"}
		// No such pod: a broken exec is an error, not "unreachable".
		_, err = Reach(Echoes{to}.In("cluster2").ServiceTarget()).Match(from)
		gomega.Expect(err).To(gomega.MatchError(gomega.ContainSubstring(`cluster cluster1: exec in ns/echo-1: pods "echo-1" not found`)))
		m := &reachMatcher{target: to.PodTarget(), from: from.String(), answer: "HTTP/1.0 200 OK\r\n\r\nmeshtest-echo cluster=cluster3 pod=x\n"}
		gomega.Expect(m.FailureMessage(nil)).To(gomega.Equal("pod cluster1/ns/echo-1 could not reach pod cluster2/ns/echo-2 at 10.20.0.7:8080: something answered, but not it " +
			"(want \"meshtest-echo cluster=cluster2 pod=echo-2\" in the answer):\n    HTTP/1.0 200 OK\r\n    \r\n    meshtest-echo cluster=cluster3 pod=x"))
		m = &reachMatcher{target: to.ServiceTarget(), from: from.String(), err: &ExitError{Code: 1}}
		gomega.Expect(m.FailureMessage(nil)).To(gomega.Equal("pod cluster1/ns/echo-1 could not reach service cluster2/ns/echo at 10.255.20.9:80: nc failed (exit code 1): no answer (connection refused or timed out)"))
		gomega.Expect(strings.Split(m.NegatedFailureMessage(nil), "\n")[0]).To(gomega.Equal("pod cluster1/ns/echo-1 reached service cluster2/ns/echo at 10.255.20.9:80, and should not have; it answered:"))

		// Dual stack: a target per family, each expecting the same pod.
		to.PodIPs, to.ServiceIPs = []string{"10.20.0.7", "fd00:10:20::7"}, []string{"10.255.20.9", "fd00:10:255:20::9"}
		var got []string
		for _, t := range append(to.PodTargets(), to.ServiceTargets()...) {
			got = append(got, t.describe()+" expects "+t.Expect)
		}
		gomega.Expect(got).To(gomega.Equal([]string{
			"pod cluster2/ns/echo-2 at 10.20.0.7:8080 expects meshtest-echo cluster=cluster2 pod=echo-2",
			"pod cluster2/ns/echo-2 at [fd00:10:20::7]:8080 expects meshtest-echo cluster=cluster2 pod=echo-2",
			"service cluster2/ns/echo at 10.255.20.9:80 expects meshtest-echo cluster=cluster2 ",
			"service cluster2/ns/echo at [fd00:10:255:20::9]:80 expects meshtest-echo cluster=cluster2 ",
		}))
	})
})

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
