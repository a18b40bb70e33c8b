package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/meshctl/meshctl/pkg/install/istio"
	"github.com/meshctl/meshctl/pkg/meshca"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// ambientUp is the part of `up -o json` the ambient specs read.
type ambientUp struct {
	Install struct {
		Image string         `json:"image"`
		Istio *installOutput `json:"istio"`
	} `json:"install"`
}

// ztunnelDump is the part of the proxy's /config_dump (ztunnel's shape)
// the ambient specs read.
type ztunnelDump struct {
	Workloads []struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		ClusterID string `json:"clusterId"`
	} `json:"workloads"`
	Certificates []struct {
		Identity  string `json:"identity"`
		State     string `json:"state"`
		CertChain []struct {
			PEM string `json:"pem"`
		} `json:"certChain"`
	} `json:"certificates"`
	Policies []json.RawMessage `json:"policies"`
}

// ambientSpecs: Istio in ambient mode on meshctl's clusters, meshctl's
// proxy standing as ztunnel: `up --istio --istio-ambient` on two clusters of
// one network (pod-to-pod routed), Istio's istio-cni enrolling the pods,
// istiod issuing the certificates (chaining to meshctl's root through
// cacerts) and sending workloads and policies over XDS. Needs the offline
// images of `MESHCTL_ISTIO=1 make e2e-env` (hack/e2e/istio-build).
//
// They run on the install container's environment (aenv) once its
// `down --uninstall-only` has left the clusters as they were before meshctl
// installed anything — a user switching an environment from meshctl's
// dataplane to Istio's ambient mode — instead of two kind clusters of their
// own. The first spec is the up; a failure there skips the rest (the
// container is Ordered).
func ambientSpecs(aenv string, envOf func() *meshtest.Env) {
	Describe("Istio ambient with meshctl's proxy as ztunnel (up --istio --istio-ambient)", func() {
		pilot := istio.DefaultHub + "/pilot:" + istio.DefaultTag()
		installCNI := istio.DefaultHub + "/install-cni:" + istio.DefaultTag()
		var mesh *meshtest.Env
		var up ambientUp
		var args []string
		var ns string

		BeforeAll(func(ctx SpecContext) {
			mesh = envOf()
			// Under a focus on these specs the install container's
			// uninstall-only did not run: do it, so that up starts from
			// the same clusters either way.
			if _, err := mesh.Clusters()[0].Kube.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-proxy", metav1.GetOptions{}); err == nil {
				meshctl("down", "--env", aenv, "--uninstall-only")
			}
			// The meshed specs before these applied minimal CRDs for the
			// policies; Istio's base chart brings its own.
			removeIstioSecurityCRDs(ctx, mesh)
			// In BeforeAll, the namespace lives until this container's
			// last spec.
			ns = mesh.CreateNamespace(ctx, "ambient-", map[string]string{"istio.io/dataplane-mode": "ambient"})
		})

		BeforeEach(func() {
			for _, img := range []string{pilot, installCNI} {
				if _, err := docker("image", "inspect", img); err != nil {
					Skip("image " + img + " is not in Docker: run `MESHCTL_ISTIO=1 make e2e-env`")
				}
			}
		})

		It("up --istio --istio-ambient installs istio-base, istiod, istio-cni and ztunnel everywhere, and a rerun changes nothing", func() {
			args = []string{"up", "--env", aenv, "--clusters", "2", "--image", suite.image, "--registry=false", "--istio", "--istio-ambient"}
			meshctlJSON(&up, args...)
			Expect(up.Install.Istio).NotTo(BeNil(), "up -o json has no install.istio")
			Expect(releaseActions(up.Install.Istio)).To(ConsistOf(allActions(up.Install.Istio, "installed")))
			Expect(releaseActions(up.Install.Istio)).To(ContainElements("cluster1/istio-cni=installed", "cluster1/ztunnel=installed", "cluster2/ztunnel=installed"))
			Expect(releaseActions(up.Install.Istio)).To(HaveLen(8))
			var again ambientUp
			meshctlJSON(&again, args...)
			Expect(releaseActions(again.Install.Istio)).To(ConsistOf(allActions(again.Install.Istio, "unchanged")))
		})

		It("runs meshctl's proxy as DaemonSet istio-system/ztunnel, Ready on every node, and no meshctl CNI beside istio-cni", func(ctx SpecContext) {
			Expect(up.Install.Image).NotTo(BeEmpty(), "up -o json names no dataplane image")
			for _, c := range mesh.Clusters() {
				Eventually(func(g Gomega) {
					ds, err := c.Kube.AppsV1().DaemonSets("istio-system").Get(ctx, "ztunnel", metav1.GetOptions{})
					g.Expect(err).NotTo(HaveOccurred(), "%s: DaemonSet istio-system/ztunnel", c.Name)
					g.Expect(ds.Spec.Template.Spec.Containers[0].Image).To(Equal(up.Install.Image), "%s: ztunnel does not run meshctl's proxy", c.Name)
					g.Expect(ds.Spec.Template.Spec.ServiceAccountName).To(Equal("ztunnel"), c.Name)
					g.Expect(ds.Status.NumberReady).To(Equal(ds.Status.DesiredNumberScheduled), "%s: ztunnel pods not all Ready: %+v", c.Name, ds.Status)
					g.Expect(ds.Status.DesiredNumberScheduled).To(BeNumerically(">=", 1), c.Name)
					cni, err := c.Kube.AppsV1().DaemonSets("istio-system").Get(ctx, "istio-cni-node", metav1.GetOptions{})
					g.Expect(err).NotTo(HaveOccurred(), "%s: DaemonSet istio-system/istio-cni-node", c.Name)
					g.Expect(cni.Status.NumberReady).To(Equal(cni.Status.DesiredNumberScheduled), "%s: istio-cni-node pods not all Ready: %+v", c.Name, cni.Status)
				}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
				_, err := c.Kube.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-cni", metav1.GetOptions{})
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: meshctl's own CNI is installed beside istio-cni (%v)", c.Name, err)
			}
		})

		It("carries a cluster1 pod's call to a cluster2 Service by name over HBONE, with istiod's certificates chaining to meshctl's root", func(ctx SpecContext) {
			client := mesh.DeployEcho(ctx, ns, "client").In("cluster1")
			local := remoteOnlyEcho(ctx, mesh, ns, "svc")
			zt := ztunnelOf(ctx, client)
			before := hboneOpened(ctx, zt)
			byName := meshtest.Address("svc."+ns+".svc.cluster.local", meshtest.EchoServicePort)
			byName.Expect = "meshtest-echo cluster=cluster2 "
			Eventually(client).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(2*time.Second).Should(meshtest.Reach(byName),
				"cluster1's pod never reached svc.%s in cluster2 by name (its Service in cluster1 %s has no endpoints)", ns, local.ServiceIP)
			after := hboneOpened(ctx, zt)
			Expect(after["outbound"]).To(BeNumerically(">", before["outbound"]), "%s: the call was not tunnelled over HBONE (outbound %v -> %v)", zt, before["outbound"], after["outbound"])
			Expect(after["outbound_passthrough"]).To(Equal(before["outbound_passthrough"]), "%s: a call went in plaintext", zt)

			root, err := os.ReadFile(filepath.Join(meshca.Dir(suite.artifacts, aenv), meshca.RootCertFile))
			Expect(err).NotTo(HaveOccurred())
			roots := x509.NewCertPool()
			Expect(roots.AppendCertsFromPEM(root)).To(BeTrue(), "meshctl's root is not PEM")
			identity := "spiffe://cluster.local/ns/" + ns + "/sa/default"
			Eventually(func(g Gomega) {
				d, err := configDump(ctx, zt)
				g.Expect(err).NotTo(HaveOccurred(), "%s: /config_dump on 15000", zt)
				var names []string
				for _, w := range d.Workloads {
					names = append(names, w.ClusterID+"/"+w.Namespace+"/"+w.Name)
				}
				g.Expect(names).To(ContainElement(HavePrefix("cluster2/"+ns+"/svc-")), "%s: istiod sent no workload of cluster2's svc", zt)
				var found bool
				for _, c := range d.Certificates {
					if c.Identity != identity {
						continue
					}
					found = true
					g.Expect(c.State).To(Equal("Available"), "%s: certificate of %s", zt, identity)
					g.Expect(c.CertChain).NotTo(BeEmpty(), "%s: certificate of %s has no chain", zt, identity)
					leaf, inter := parseChain(g, c.CertChain)
					_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
					g.Expect(err).NotTo(HaveOccurred(), "%s: istiod's certificate for %s does not chain to meshctl's root", zt, identity)
				}
				g.Expect(found).To(BeTrue(), "%s: no certificate for %s in /config_dump", zt, identity)
			}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		})

		It("enforces a DENY AuthorizationPolicy that istiod sends the server's ztunnel, and lets the call through once it is deleted", func(ctx SpecContext) {
			client := mesh.DeployEcho(ctx, ns, "authz-client").In("cluster1")
			local := remoteOnlyEcho(ctx, mesh, ns, "authz")
			target := local.ServiceTarget()
			target.Expect = "meshtest-echo cluster=cluster2 "
			Eventually(client).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(2*time.Second).Should(meshtest.Reach(target), "before any policy")

			c2 := mesh.Cluster("cluster2")
			dc, err := dynamic.NewForConfig(c2.Config)
			Expect(err).NotTo(HaveOccurred())
			c2.Apply(ctx, ns, `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-authz}
spec:
  selector:
    matchLabels: {app: authz}
  action: DENY
  rules:
  - from:
    - source: {namespaces: [`+ns+`]}
`)
			DeferCleanup(func(ctx SpecContext) {
				err := dc.Resource(authorizationPolicies).Namespace(ns).Delete(ctx, "deny-authz", metav1.DeleteOptions{})
				if !apierrors.IsNotFound(err) {
					Expect(err).NotTo(HaveOccurred())
				}
			})
			server := ztunnelOfPod(ctx, c2, ns, "app=authz")
			Eventually(func(g Gomega) {
				d, err := configDump(ctx, server)
				g.Expect(err).NotTo(HaveOccurred(), "%s: /config_dump on 15000", server)
				var all []string
				for _, p := range d.Policies {
					all = append(all, string(p))
				}
				g.Expect(strings.Join(all, "\n")).To(ContainSubstring("deny-authz"), "%s: istiod has not sent the policy", server)
			}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
			Eventually(client).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(2*time.Second).ShouldNot(meshtest.Reach(target), "the DENY policy is not enforced")
			Expect(dc.Resource(authorizationPolicies).Namespace(ns).Delete(ctx, "deny-authz", metav1.DeleteOptions{})).To(Succeed())
			Eventually(client).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(2*time.Second).Should(meshtest.Reach(target), "the call is still denied after the policy was deleted")
		})

		It("keeps an established connection through istiod's restart, and resyncs: a workload made after it is reachable", func(ctx SpecContext) {
			By("deploying the long connection's client and server")
			client := mesh.DeployEcho(ctx, ns, "long-client").In("cluster1")
			c2 := mesh.Cluster("cluster2")
			// The Service in both clusters (cluster1's resolves the name), its
			// one pod in cluster2.
			longSvc := `apiVersion: v1
kind: Service
metadata:
  name: long
  labels: {istio.io/global: "true"}
spec:
  selector: {app: long}
  ports:
  - {name: tcp, port: 9000, targetPort: 9000}
`
			mesh.Cluster("cluster1").Apply(ctx, ns, longSvc)
			c2.Apply(ctx, ns, longSvc)
			c2.Apply(ctx, ns, `apiVersion: v1
kind: Pod
metadata:
  name: long
  labels: {app: long}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: long
    image: `+suite.testImage+`
    imagePullPolicy: IfNotPresent
    # busybox's nc -l ends the connection once its stdin ends: an open
    # stdin keeps it up for as long as the client is.
    stdin: true
    # Every line the client sends goes to the log; "closed" marks the end
    # of a connection.
    command: ["sh", "-c", "while true; do nc -l -p 9000; echo closed; done"]
`)
			Eventually(func(g Gomega) {
				p, err := c2.Kube.CoreV1().Pods(ns).Get(ctx, "long", metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "cluster2's long pod: %+v", p.Status)
			}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
			By("opening the long connection")
			// One connection, a line a second, from cluster1 to cluster2 by
			// name, in the background of the client's pod.
			_, errOut, err := client.Exec(ctx, "sh", "-c",
				`setsid sh -c 'i=0; while true; do echo ping $i; i=$((i+1)); sleep 1; done | nc long.`+ns+`.svc.cluster.local 9000' </dev/null >/dev/null 2>&1 &`)
			Expect(err).NotTo(HaveOccurred(), "starting the long connection: %s", errOut)
			var pings int
			Eventually(func(g Gomega) {
				var closed int
				pings, closed = longLog(ctx, g, c2, ns)
				g.Expect(pings).To(BeNumerically(">=", 5), "the long connection from cluster1 carries no lines to cluster2's long pod")
				g.Expect(closed).To(BeZero(), "the long connection closed before istiod restarted")
			}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())

			By("restarting every primary's istiod")
			restartIstiod(ctx, mesh.Primaries()...)
			By("checking the long connection still carries lines")
			// A few lines past the new istiods' start: the connection crossed
			// the restart. That it outlives the proxies' resync from them is
			// checked after the resync below, not by waiting here.
			moreLines(ctx, c2, ns, pings, "istiod's restart")

			// Resync: a workload made after the restart is known only from the
			// new istiods.
			By("deploying a Service after the restart")
			fresh := remoteOnlyEcho(ctx, mesh, ns, "fresh")
			By("reaching it: the proxies resynced")
			target := meshtest.Address("fresh."+ns+".svc.cluster.local", meshtest.EchoServicePort)
			target.Expect = "meshtest-echo cluster=cluster2 "
			Eventually(client).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(2*time.Second).Should(meshtest.Reach(target),
				"a Service made after istiod's restart (cluster1's ClusterIP %s, endpoints only in cluster2) is unreachable: the proxy did not resync", fresh.ServiceIP)
			// The proxies have resynced (they carried a call to a Service only
			// the new istiods told them of): the long connection still
			// carries lines, and never closed.
			atResync, _ := longLog(ctx, Default, c2, ns)
			moreLines(ctx, c2, ns, atResync, "the proxies' resync")
		})

		It("uninstall removes ztunnel, istio-cni, istiod and istio-base", func() {
			var res installOutput
			meshctlJSON(&res, "uninstall", "--env", aenv)
			var got []string
			for _, c := range res.Clusters {
				for _, r := range c.Releases {
					if strings.HasPrefix(r.Name, "istio") || r.Name == "ztunnel" {
						got = append(got, c.Cluster+"/"+r.Name+"="+r.Action)
					}
				}
			}
			Expect(got).To(ConsistOf(
				"cluster1/ztunnel=uninstalled", "cluster1/istio-cni=uninstalled", "cluster1/istiod=uninstalled", "cluster1/istio-base=uninstalled",
				"cluster2/ztunnel=uninstalled", "cluster2/istio-cni=uninstalled", "cluster2/istiod=uninstalled", "cluster2/istio-base=uninstalled"))
		})
	})
}

// globalLabel marks a Service global, as Istio's ambient multicluster
// guide does: Istio's ambient profile (meshConfig.serviceScopeConfigs)
// makes only such Services span clusters; any other keeps the endpoints of
// its own cluster.
const globalLabel = `{"metadata":{"labels":{"istio.io/global":"true"}}}`

// markGlobal labels Service name of ns global in every cluster.
func markGlobal(ctx context.Context, m *meshtest.Env, ns, name string) {
	GinkgoHelper()
	for _, c := range m.Clusters() {
		_, err := c.Kube.CoreV1().Services(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(globalLabel), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred(), "%s: marking Service %s/%s global", c.Name, ns, name)
	}
}

// remoteOnlyEcho deploys an echo everywhere, marks its Service global and
// deletes cluster1's pods: cluster1 keeps the Service (and its name), its
// endpoints are in cluster2 only. It returns cluster1's instance.
func remoteOnlyEcho(ctx context.Context, m *meshtest.Env, ns, name string) *meshtest.Echo {
	GinkgoHelper()
	local := m.DeployEcho(ctx, ns, name).In("cluster1")
	markGlobal(ctx, m, ns, name)
	Expect(local.Cluster.Kube.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
	Eventually(func(g Gomega) {
		pods, err := local.Cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods.Items).To(BeEmpty(), "cluster1's %s pods are still there", name)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	return local
}

// ztunnelOf is the ztunnel (meshctl's proxy under Istio's chart) on an echo
// pod's node, found as Istio's tools find it: app=ztunnel in istio-system.
func ztunnelOf(ctx context.Context, e *meshtest.Echo) nodeProxy {
	GinkgoHelper()
	return ztunnelOfPod(ctx, e.Cluster, e.Namespace, "app="+e.Name)
}

// ztunnelOfPod is the ztunnel on the node of the first pod of namespace ns
// that selector selects.
func ztunnelOfPod(ctx context.Context, c *meshtest.Cluster, ns, selector string) nodeProxy {
	GinkgoHelper()
	pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	Expect(err).NotTo(HaveOccurred())
	Expect(pods.Items).NotTo(BeEmpty(), "%s: no pod %s in %s", c.Name, selector, ns)
	node := pods.Items[0].Spec.NodeName
	zt, err := c.Kube.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{LabelSelector: "app=ztunnel", FieldSelector: "spec.nodeName=" + node})
	Expect(err).NotTo(HaveOccurred())
	Expect(zt.Items).To(HaveLen(1), "%s: ztunnel pods (app=ztunnel) on node %s", c.Name, node)
	return nodeProxy{cluster: c, pod: zt.Items[0].Name}
}

// configDump reads a proxy's /config_dump from its admin port, which
// listens on the pod's localhost only: through a port-forward, which the
// kubelet dials inside the pod's network namespace.
func configDump(ctx context.Context, p nodeProxy) (*ztunnelDump, error) {
	transport, upgrader, err := spdy.RoundTripperFor(p.cluster.Config)
	if err != nil {
		return nil, err
	}
	url := p.cluster.Kube.CoreV1().RESTClient().Post().Resource("pods").Namespace("istio-system").Name(p.pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:15000"}, stop, ready, io.Discard, GinkgoWriter)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return nil, fmt.Errorf("port-forward to %s:15000: %w", p, err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		return nil, fmt.Errorf("port-forward to %s:15000: no local port (%v)", p, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/config_dump", ports[0].Local), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /config_dump of %s: %s %v: %.200s", p, resp.Status, err, body)
	}
	var d ztunnelDump
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("/config_dump of %s: %w", p, err)
	}
	return &d, nil
}

// parseChain parses a certificate chain of /config_dump: the leaf, and
// the rest as intermediates.
func parseChain(g Gomega, chain []struct {
	PEM string `json:"pem"`
}) (*x509.Certificate, *x509.CertPool) {
	inter := x509.NewCertPool()
	var leaf *x509.Certificate
	for n, c := range chain {
		b, _ := pem.Decode([]byte(c.PEM))
		g.Expect(b).NotTo(BeNil(), "certificate %d of the chain is not PEM", n)
		cert, err := x509.ParseCertificate(b.Bytes)
		g.Expect(err).NotTo(HaveOccurred(), "certificate %d of the chain", n)
		if n == 0 {
			leaf = cert
			continue
		}
		inter.AddCert(cert)
	}
	return leaf, inter
}

// longLog counts, in cluster2's long pod's log, the lines the long
// connection carried and the connections that ended.
func longLog(ctx context.Context, g Gomega, c *meshtest.Cluster, ns string) (pings, closed int) {
	raw, err := c.Kube.CoreV1().Pods(ns).GetLogs("long", &corev1.PodLogOptions{}).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "%s: logs of %s/long", c.Name, ns)
	for _, l := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(l, "ping "):
			pings++
		case l == "closed":
			closed++
		}
	}
	return pings, closed
}

// moreLines waits until the long connection has carried 3 lines past
// since (a count of longLog's) and never closed: it outlived what.
func moreLines(ctx context.Context, c *meshtest.Cluster, ns string, since int, what string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		pings, closed := longLog(ctx, g, c, ns)
		g.Expect(closed).To(BeZero(), "the long connection closed across %s", what)
		g.Expect(pings).To(BeNumerically(">=", since+3), "the long connection stopped carrying lines after %s", what)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// restartIstiod deletes every istiod pod in each of cs and waits until every istiod
// pod is a new one and Ready: the proxy loses istiod altogether for a
// while. (Not `kubectl rollout restart`: its surge pod asks istiod's
// 500m CPU on top of the old one's, more than a one-node kind cluster
// running ambient has left, and stays Pending.)
func restartIstiod(ctx context.Context, cs ...*meshtest.Cluster) {
	GinkgoHelper()
	// Every cluster's istiod pods go first, then the waits: the clusters'
	// istiods restart at the same time, as after a node failure, and the
	// spec waits for one start, not one a cluster.
	old := map[string][]corev1.Pod{}
	for _, c := range cs {
		pods, err := c.Kube.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).NotTo(BeEmpty(), "%s: no istiod pod", c.Name)
		old[c.Name] = pods.Items
		for _, p := range pods.Items {
			Expect(c.Kube.CoreV1().Pods("istio-system").Delete(ctx, p.Name, metav1.DeleteOptions{})).To(Succeed(), "%s: deleting istiod pod %s", c.Name, p.Name)
		}
	}
	for _, c := range cs {
		Eventually(func(g Gomega) {
			pods, err := c.Kube.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"})
			g.Expect(err).NotTo(HaveOccurred())
			var ready int
			for _, p := range pods.Items {
				for _, o := range old[c.Name] {
					g.Expect(p.Name).NotTo(Equal(o.Name), "%s: istiod pod %s of before the restart is still there", c.Name, o.Name)
				}
				if podIsReady(&p) {
					ready++
				}
			}
			g.Expect(ready).To(BeNumerically(">=", 1), "%s: no new istiod pod is Ready", c.Name)
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	}
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
