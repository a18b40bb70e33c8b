package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

// Two multi-network environments come up at the same moment on the one
// kind docker network, as two CI jobs or two suites on one machine do: each
// claims MetalLB pools while the other does, and their gateways must still
// get disjoint pools — two speakers answering ARP for one address would send
// one environment's cross-network traffic to the other's gateway.
var _ = Describe("east-west gateways between networks", Ordered, slow, func() {
	envs := []string{env + "-mn", env + "-mn2"}
	gwEnv := envs[0]
	type upOutput struct {
		cluster.UpResult
		Gateways []gateway.ClusterResult `json:"gateways"`
	}
	ups := make([]upOutput, len(envs))
	up := &ups[0]
	meshes := make([]*meshtest.Env, len(envs))
	var mesh *meshtest.Env

	BeforeAll(func(ctx SpecContext) {
		requireMetalLBImages()
		DeferCleanup(func() {
			if keep() {
				return
			}
			for _, e := range envs {
				_, _, _ = meshctlResult("down", "--env", e)
			}
		})
		var wg sync.WaitGroup
		for k, e := range envs {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				meshctlJSON(&ups[k], "up", "--env", e, "--clusters", "2", "--networks", "2", "--image", suite.image, "--registry=false", "--install=false")
			}()
		}
		wg.Wait()
		mesh = attach(ctx, gwEnv, meshtest.WithClusters(2), meshtest.WithNetworks(2))
		meshes[0] = mesh
		meshes[1] = reuse(ctx, envs[1], meshtest.WithClusters(2), meshtest.WithNetworks(2))
	})

	It("gives each cluster MetalLB and a gateway address from its own pool, disjoint across both environments", func(ctx SpecContext) {
		out, err := docker("network", "inspect", cluster.KindNetwork(), "--format", "{{json .IPAM.Config}}")
		Expect(err).NotTo(HaveOccurred(), out)
		var ipam []struct{ Subnet string }
		Expect(json.Unmarshal([]byte(out), &ipam)).To(Succeed())
		var subnets []netip.Prefix
		for _, s := range ipam {
			subnets = append(subnets, netip.MustParsePrefix(s.Subnet))
		}

		var all []netip.Prefix
		for k, u := range ups {
			Expect(u.Clusters).To(HaveLen(2))
			Expect(u.Gateways).To(HaveLen(2))
			Expect(u.Gateways[0].Network).NotTo(Equal(u.Gateways[1].Network))
			for _, gw := range u.Gateways {
				Expect(gw.Service).To(Equal("istio-system/istio-eastwestgateway"))
				Expect(gw.Addresses).NotTo(BeEmpty(), gw.Cluster)
				var pools []netip.Prefix
				for _, p := range gw.Pools {
					pr := netip.MustParsePrefix(p)
					inNetwork := false
					for _, s := range subnets {
						inNetwork = inNetwork || s.Contains(pr.Addr())
					}
					Expect(inNetwork).To(BeTrue(), "pool %s of %s/%s is outside the kind network %v", p, envs[k], gw.Cluster, subnets)
					for _, other := range all {
						Expect(other.Overlaps(pr)).To(BeFalse(), "pools %s and %s (of %s/%s) overlap", other, pr, envs[k], gw.Cluster)
					}
					pools = append(pools, pr)
				}
				all = append(all, pools...)
				addr := netip.MustParseAddr(gw.Address())
				inPool := false
				for _, p := range pools {
					inPool = inPool || p.Contains(addr)
				}
				Expect(inPool).To(BeTrue(), "%s/%s's gateway address %s is not from its pools %v", envs[k], gw.Cluster, addr, pools)

				cs := meshes[k].Cluster(gw.Cluster).Kube
				svc, err := cs.CoreV1().Services("istio-system").Get(ctx, "istio-eastwestgateway", metav1.GetOptions{})
				Expect(err).NotTo(HaveOccurred())
				Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeLoadBalancer))
				Expect(svc.Labels).To(HaveKeyWithValue("topology.istio.io/network", gw.Network))
				Expect(svc.Status.LoadBalancer.Ingress).NotTo(BeEmpty())
				Expect(svc.Status.LoadBalancer.Ingress[0].IP).To(Equal(gw.Address()))

				pods, err := cs.CoreV1().Pods("metallb-system").List(ctx, metav1.ListOptions{LabelSelector: "app=metallb"})
				Expect(err).NotTo(HaveOccurred())
				components := map[string]bool{}
				for _, p := range pods.Items {
					Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "%s/%s: %s", envs[k], gw.Cluster, p.Name)
					components[p.Labels["component"]] = true
					Expect(p.Spec.Containers[0].Image).To(HavePrefix("meshctl/metallb-"))
				}
				Expect(components).To(HaveKey("controller"))
				Expect(components).To(HaveKey("speaker"))
			}
		}
	})

	It("shows each cluster's pools in meshctl status, as connect gave them", func() {
		for k, u := range ups {
			var st cluster.StatusResult
			meshctlJSON(&st, "status", "--env", envs[k])
			got := map[string][]string{}
			for _, c := range st.Clusters {
				Expect(c.LoadBalancerPools).NotTo(BeNil(), "%s/%s has no loadBalancerPools in status -o json", envs[k], c.Name)
				Expect(c.LoadBalancerPools.DockerNetwork).To(Equal(cluster.KindNetwork()))
				got[c.Name] = c.LoadBalancerPools.CIDRs
			}
			want := map[string][]string{}
			for _, gw := range u.Gateways {
				want[gw.Cluster] = gw.Pools
			}
			Expect(got).To(Equal(want), "status of %s", envs[k])
		}
		text := meshctl("status", "--env", gwEnv)
		for _, gw := range up.Gateways {
			Expect(text).To(ContainSubstring("load-balancer pools "+strings.Join(gw.Pools, ",")), "status of %s", gwEnv)
		}
	})

	It("answers TCP on each gateway address, from the other network and from the other environment", func(ctx SpecContext) {
		for k, u := range ups {
			for _, gw := range u.Gateways {
				fakeGateway(ctx, meshes[k].Cluster(gw.Cluster), gw.Network, "meshctl-gw-"+envs[k]+"-"+gw.Cluster)
			}
		}
		probes := make([]meshtest.Echoes, len(envs))
		for k, m := range meshes {
			probes[k] = m.DeployEcho(ctx, m.CreateNamespace(ctx, "gw-probe-", nil), "probe")
		}
		for k, u := range ups {
			for i, gw := range u.Gateways {
				other := u.Gateways[1-i]
				from := []*meshtest.Echo{
					probes[k].In(other.Cluster), // the other network
					probes[1-k].In(gw.Cluster),  // the other environment
				}
				for _, f := range from {
					Eventually(f).WithTimeout(3 * time.Minute).WithPolling(3 * time.Second).
						Should(meshtest.Reach(gatewayTarget(envs[k], gw, "meshctl-gw-"+envs[k]+"-"+gw.Cluster)))
				}
			}
		}
	})

	// (only the first environment reconnects: it is the one that must keep
	// blocks while the other holds blocks too; the other's rerun costs
	// ~20 s and is covered by pkg/connect/gateway's integration test)
	It("changes nothing when connect runs again", func(ctx SpecContext) {
		// ours, and objects MetalLB's controller also writes (statuses);
		// a second apply within the same second would hide a change, so wait
		time.Sleep(time.Second)
		objects := []schema.GroupVersionResource{
			{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
			{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
			{Group: "apps", Version: "v1", Resource: "deployments"},
			{Group: "apps", Version: "v1", Resource: "daemonsets"},
			{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"},
			{Version: "v1", Resource: "services"},
		}
		versions := func() map[string]string {
			out := map[string]string{}
			for _, gw := range up.Gateways {
				dyn := mesh.Cluster(gw.Cluster).Dynamic
				for _, gvr := range objects {
					list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
					Expect(err).NotTo(HaveOccurred(), "%s", gvr)
					for _, o := range list.Items {
						ns := o.GetNamespace()
						if ns != "metallb-system" && ns != "istio-system" && !strings.HasSuffix(o.GetName(), "metallb.io") && !strings.HasPrefix(o.GetName(), "metallb") {
							continue
						}
						// MetalLB writes statuses (pool usage, service
						// status) on its own schedule: what must not move is
						// the generation and the time meshctl's apply last
						// changed a field it owns.
						applied := ""
						for _, mf := range o.GetManagedFields() {
							if mf.Manager == "meshctl" && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Time != nil {
								applied = mf.Time.UTC().Format(time.RFC3339)
							}
						}
						Expect(applied).NotTo(BeEmpty(), "%s %s/%s has no meshctl apply entry", gvr.Resource, ns, o.GetName())
						out[gw.Cluster+" "+gvr.Resource+" "+ns+"/"+o.GetName()] = fmt.Sprintf("generation %d, applied %s", o.GetGeneration(), applied)
					}
				}
			}
			return out
		}
		before := versions()
		// MetalLB runs without its webhook (see pkg/connect/gateway): no
		// configuration of it, which nothing would serve.
		Expect(before).NotTo(HaveKey(ContainSubstring("validatingwebhookconfigurations")))
		Expect(before).To(HaveKey(ContainSubstring("customresourcedefinitions /bgppeers.metallb.io")))
		var again struct {
			Gateways []gateway.ClusterResult `json:"gateways"`
		}
		meshctlJSON(&again, "connect", "--env", gwEnv)
		Expect(again.Gateways).To(HaveLen(2))
		for i, gw := range again.Gateways {
			Expect(gw.Addresses).To(Equal(up.Gateways[i].Addresses))
			Expect(gw.Pools).To(Equal(up.Gateways[i].Pools))
		}
		Expect(versions()).To(Equal(before), "a rerun changed objects")
	})

	// The dataplane on these two networks, before the clusters go.
	networkSpecs(gwEnv, func() *meshtest.Env { return mesh })

	It("deletes its clusters", func() {
		current = nil // nothing left to collect artifacts from
		for _, e := range envs {
			var down cluster.DownResult
			meshctlJSON(&down, "down", "--env", e)
			Expect(down.Deleted).To(ConsistOf(e+"-cluster1", e+"-cluster2"))
		}
		out, _ := docker("ps", "-a", "--filter", "label=io.x-k8s.kind.cluster", "--format", "{{.Names}}")
		for _, e := range envs {
			Expect(out).NotTo(ContainSubstring(e + "-"))
		}
	})
})

// fakeGateway stands in for the gateway pods the dataplane will deploy: a
// pod with the labels the east-west gateway Service selects, whose HTTP
// server on the status port (15021) answers reply, as meshtest's echo does.
// busybox httpd is the pod's PID 1, which ignores SIGTERM: with the default
// grace period its deletion (networkSpecs deletes it for the real gateway)
// took 30 s, which the next spec spent waiting for it to go.
func fakeGateway(ctx SpecContext, c *meshtest.Cluster, network, reply string) {
	GinkgoHelper()
	labels, err := json.Marshal(gateway.GatewaySelector(network))
	Expect(err).NotTo(HaveOccurred())
	c.Apply(ctx, "istio-system", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: fake-eastwestgateway
  labels: %s
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: listen
    image: %s
    imagePullPolicy: Never
    command: [sh, -c, "mkdir -p /www && echo %s > /www/index.html && exec httpd -f -p 15021 -h /www"]
`, labels, suite.testImage, reply))
}

// gatewayTarget is a gateway address's status port, answering reply
// (fakeGateway's).
func gatewayTarget(env string, gw gateway.ClusterResult, reply string) meshtest.Target {
	return meshtest.Target{What: fmt.Sprintf("%s/%s's gateway", env, gw.Cluster), Host: gw.Address(), Port: 15021, Expect: reply}
}

// requireMetalLBImages skips the container (fails it under
// MESHCTL_E2E_REQUIRE) unless `make e2e-env` built MetalLB's images.
func requireMetalLBImages() {
	GinkgoHelper()
	for _, img := range []string{gateway.DefaultControllerImage, gateway.DefaultSpeakerImage} {
		if _, err := docker("image", "inspect", img); err != nil {
			reason := "image " + img + " is not on this machine: run `make e2e-env` (hack/e2e/build-metallb.sh)"
			if os.Getenv("MESHCTL_E2E_REQUIRE") != "" {
				Fail(reason)
			}
			Skip(reason)
		}
	}
}
