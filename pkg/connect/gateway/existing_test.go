package gateway

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// An existing (non-kind) cluster in a multi-network environment gets the
// gateway Service and keeps the address of its own load balancer: no
// MetalLB, no image loading, no pool.
func TestIntegrationExistingClusterGetsOnlyTheService(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two kube-apiservers")
	}
	kindCfg, existingCfg := testenv.New(t), testenv.New(t)
	src := newEnvSource(nil, "gw", map[string]*rest.Config{"kind1": kindCfg, "cloud": existingCfg},
		model.ClusterPlan{Name: "cloud", Network: "network-2", Existing: true},
		model.ClusterPlan{Name: "kind1", KindName: "gw-kind1", Network: "network-1"})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	standIn(ctx, t, kindCfg)
	// The existing cluster's own load-balancer controller.
	lb := make(chan error, 1)
	go func() { lb <- testenv.LoadBalancer(ctx, existingCfg, GatewayNamespace, GatewayName, "203.0.113.7") }() // TEST-NET-3: never contacted
	defer func() {
		stop()
		if err := <-lb; err != nil {
			t.Error(err)
		}
	}()
	loader := &recordingLoader{calls: map[string][]string{}}
	i := New(src, WithSubnets(netip.MustParsePrefix("172.18.0.0/16")), WithImageLoader(loader), WithTimeout(time.Minute))
	i.poll = 100 * time.Millisecond
	res, err := i.Install(context.Background(), "gw")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Clusters) != 2 {
		t.Fatalf("result %+v", res)
	}
	cloud, kind1 := res.Clusters[0], res.Clusters[1]
	if cloud.Cluster != "cloud" || cloud.Address() != "203.0.113.7" || len(cloud.Pools) != 0 {
		t.Errorf("existing cluster: %+v, want the cloud's address and no pool", cloud)
	}
	if kind1.Cluster != "kind1" || len(kind1.Pools) != 1 || !inPools(kind1.Address(), []netip.Prefix{netip.MustParsePrefix(kind1.Pools[0])}) {
		t.Errorf("kind cluster: %+v, want an address from its MetalLB pool", kind1)
	}
	if _, ok := loader.calls[""]; ok || len(loader.calls) != 1 {
		t.Errorf("images loaded %v, want only into the kind cluster", loader.calls)
	}
	k, _ := newKube(existingCfg)
	if _, err := k.cs.CoreV1().Namespaces().Get(ctx, MetalLBNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s in the existing cluster (err %v): want no MetalLB there", MetalLBNamespace, err)
	}
	if got := res.GatewayAddresses()["network-2"]; strings.Join(got, ",") != "203.0.113.7" {
		t.Errorf("GatewayAddresses[network-2] = %v", got)
	}
}
