package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/pkg/install/istio"
	"github.com/meshctl/meshctl/pkg/install/meshca"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// istioOutput is the istio part of what `up -o json` prints.
type istioOutput struct {
	Install struct {
		Istio *installOutput `json:"istio"`
	} `json:"install"`
}

// Istio's own control plane from Istio's charts on meshctl's clusters: two
// primaries and a remote of cluster1 on one network, `up --istio` with the
// offline images of make e2e-env (hack/e2e/istio-build).
var _ = Describe("Istio's control plane (up --istio)", Ordered, func() {
	ienv := env + "-istio"
	pilot := istio.DefaultHub + "/pilot:" + istio.DefaultTag()
	var mesh *meshtest.Env
	var up istioOutput
	var args []string

	BeforeAll(func(ctx SpecContext) {
		if _, err := docker("image", "inspect", pilot); err != nil {
			Skip("image " + pilot + " is not in Docker: run `MESHCTL_ISTIO=1 make e2e-env`")
		}
		dir := GinkgoT().TempDir()
		topology := filepath.Join(dir, "topology.json")
		Expect(os.WriteFile(topology, []byte(`[
  {"kind": "Kubernetes", "clusterName": "cluster1", "network": "network1"},
  {"kind": "Kubernetes", "clusterName": "cluster2", "network": "network1"},
  {"kind": "Kubernetes", "clusterName": "cluster3", "network": "network1", "primaryClusterName": "cluster1"}
]`), 0o644)).To(Succeed())
		args = []string{"up", "--env", ienv, "--topology", topology, "--image", suite.image, "--registry=false", "--install=false", "--istio"}
		DeferCleanup(func() {
			if !keep() {
				meshctl("down", "--env", ienv)
			}
		})
		meshctlJSON(&up, args...)
		mesh = attach(ctx, ienv)
	})

	It("installed istio-base and istiod everywhere, and a rerun changes nothing", func() {
		Expect(up.Install.Istio).NotTo(BeNil())
		Expect(releaseActions(up.Install.Istio)).To(ConsistOf(allActions(up.Install.Istio, "installed")))
		Expect(releaseActions(up.Install.Istio)).To(HaveLen(6))
		var again istioOutput
		meshctlJSON(&again, args...)
		Expect(releaseActions(again.Install.Istio)).To(ConsistOf(allActions(again.Install.Istio, "unchanged")))
		Expect(again.Install.Istio.ImageLoaded).To(BeEmpty(), "the image is on every node already")
	})

	It("runs istiod Ready in each primary", func(ctx SpecContext) {
		for _, c := range mesh.Primaries() {
			d, err := c.Kube.AppsV1().Deployments("istio-system").Get(ctx, "istiod", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), c.Name)
			Expect(d.Status.ReadyReplicas).To(BeNumerically(">=", 1), "%s: %+v", c.Name, d.Status)
			Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(pilot))
		}
	})

	It("lists every other cluster synced in each primary's /debug/clusterz", func(ctx SpecContext) {
		for _, c := range mesh.Primaries() {
			pods, err := c.Kube.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"})
			Expect(err).NotTo(HaveOccurred())
			Expect(pods.Items).NotTo(BeEmpty(), c.Name)
			Eventually(func(g Gomega) {
				out, errOut, err := c.Exec(ctx, "istio-system", pods.Items[0].Name, "discovery", "pilot-discovery", "request", "GET", "/debug/clusterz")
				g.Expect(err).NotTo(HaveOccurred(), errOut)
				var clusters []struct{ ID, SyncStatus string }
				g.Expect(json.Unmarshal([]byte(out), &clusters)).To(Succeed(), out)
				status := map[string]string{}
				for _, cl := range clusters {
					status[cl.ID] = cl.SyncStatus
				}
				for _, o := range mesh.Clusters() {
					if o.Name != c.Name {
						g.Expect(status).To(HaveKeyWithValue(o.Name, "synced"), "%s's istiod: %s", c.Name, out)
					}
				}
			}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		}
	})

	It("distributes meshctl's root as istio-ca-root-cert", func(ctx SpecContext) {
		root, err := os.ReadFile(filepath.Join(meshca.Dir(suite.artifacts, ienv), meshca.RootCertFile))
		Expect(err).NotTo(HaveOccurred())
		for _, c := range mesh.Primaries() {
			Eventually(func(g Gomega) {
				cm, err := c.Kube.CoreV1().ConfigMaps("istio-system").Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(cm.Data["root-cert.pem"]).To(Equal(string(root)), c.Name)
			}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		}
	})

	It("uninstall removes istiod and istio-base, remotes first", func() {
		var res installOutput
		meshctlJSON(&res, "uninstall", "--env", ienv)
		for _, c := range res.Clusters {
			for _, r := range c.Releases {
				if r.Name == "istiod" || r.Name == "istio-base" {
					Expect(r.Action).To(Equal("uninstalled"), "%s/%s", c.Cluster, r.Name)
				}
			}
		}
	})
})
