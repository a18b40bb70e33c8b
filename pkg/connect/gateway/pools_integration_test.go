package gateway

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// Two multi-network environments on one docker network, each cluster a real
// API server: the second environment's MetalLB pools, and so its gateways'
// addresses, avoid the first's; reconnecting the first moves nothing.
func TestIntegrationSecondEnvironmentAvoidsTheFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four kube-apiservers")
	}
	cfgs := apiServers(t, "a1", "a2", "b1", "b2")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	for _, cfg := range cfgs {
		standIn(ctx, t, cfg)
	}
	m := newMachine()
	plan := func(env, name, network, family string) model.ClusterPlan {
		return model.ClusterPlan{Name: name, KindName: env + "-" + name, Network: network, IPFamily: family}
	}
	// the kind names say which API server plays each cluster
	envA := newEnvSource(m, "a", map[string]*rest.Config{"cluster1": cfgs["a1"], "cluster2": cfgs["a2"]},
		plan("a", "cluster1", "network-1", model.Dual), plan("a", "cluster2", "network-2", model.Dual))
	envB := newEnvSource(m, "b", map[string]*rest.Config{"cluster1": cfgs["b1"], "cluster2": cfgs["b2"]},
		plan("b", "cluster1", "network-1", model.IPv4), plan("b", "cluster2", "network-2", model.IPv4))
	subnets := []netip.Prefix{netip.MustParsePrefix("172.18.0.0/16"), netip.MustParsePrefix("fc00:f853:ccd:e793::/64")}
	install := func(src *envSource, env string) *Result {
		t.Helper()
		i := New(src, WithSubnets(subnets...), WithImageLoader(&recordingLoader{calls: map[string][]string{}}), WithTimeout(time.Minute))
		i.poll = 100 * time.Millisecond
		res, err := i.Install(context.Background(), env)
		if err != nil {
			t.Fatalf("environment %s: %v", env, err)
		}
		return res
	}
	a := install(envA, "a")
	b := install(envB, "b")

	want := map[string][]string{
		"a/cluster1": {"172.18.255.224/28", "fc00:f853:ccd:e793:ffff:ffff:ffff:ffe0/124"},
		"a/cluster2": {"172.18.255.208/28", "fc00:f853:ccd:e793:ffff:ffff:ffff:ffd0/124"},
		"b/cluster1": {"172.18.255.192/28"},
		"b/cluster2": {"172.18.255.176/28"},
	}
	addrs := map[string]string{}
	for _, r := range []*Result{a, b} {
		src := map[string]*envSource{"a": envA, "b": envB}[r.Env]
		for _, c := range r.Clusters {
			key := r.Env + "/" + c.Cluster
			if !slices.Equal(c.Pools, want[key]) {
				t.Errorf("%s: pools %v, want %v", key, c.Pools, want[key])
			}
			// what MetalLB in the cluster was given, and what is recorded
			k, _ := newKube(src.configs[c.Cluster])
			pool, err := k.dyn.Resource(schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}).Namespace(MetalLBNamespace).Get(ctx, PoolName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "addresses"); !slices.Equal(got, want[key]) {
				t.Errorf("%s: IPAddressPool addresses %v, want %v", key, got, want[key])
			}
			if got := m.pools(c.KindName); !slices.Equal(got, want[key]) {
				t.Errorf("%s: recorded pools %v, want %v", key, got, want[key])
			}
			if other, dup := addrs[c.Address()]; dup || c.Address() == "" {
				t.Errorf("%s: gateway address %q, the same as %s's", key, c.Address(), other)
			}
			addrs[c.Address()] = key
		}
	}

	// Reconnecting a, after b took blocks, keeps a's pools and addresses.
	again := install(envA, "a")
	for i, c := range again.Clusters {
		if !slices.Equal(c.Pools, a.Clusters[i].Pools) || !slices.Equal(c.Addresses, a.Clusters[i].Addresses) {
			t.Errorf("reconnecting a: %s has %v at %v, first %v at %v", c.Cluster, c.Pools, c.Addresses, a.Clusters[i].Pools, a.Clusters[i].Addresses)
		}
	}
}
