package model

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshctl/meshctl/internal/testenv"
)

// TestIntegrationKubeSource runs the standalone source against two real
// API servers: the service exists in both clusters, its only pod in
// cluster 2, which the source finds through a remote secret in cluster 1
// holding cluster 2's kubeconfig, as meshctl writes it. The local
// ClusterIP then resolves to the remote pod; deleting the secret forgets
// cluster 2.
func TestIntegrationKubeSource(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two kube-apiservers; skipped with -short")
	}
	cfg1, cfg2 := testenv.New(t), testenv.New(t)
	c1, c2 := kubernetes.NewForConfigOrDie(cfg1), kubernetes.NewForConfigOrDie(cfg2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []kubernetes.Interface{c1, c2} {
		must(c.CoreV1().Namespaces().Create(ctx, namespace("istio-system", nil), metav1.CreateOptions{}))
		must(c.CoreV1().Namespaces().Create(ctx, namespace("app", map[string]string{"istio.io/dataplane-mode": "ambient"}), metav1.CreateOptions{}))
	}
	svc1, err := c1.CoreV1().Services("app").Create(ctx, webService("app", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	must(c2.CoreV1().Services("app").Create(ctx, webService("app", ""), metav1.CreateOptions{}))
	// No kubelet: the pod's address and readiness are written as its
	// status, and its EndpointSlice by hand (no controller-manager).
	p := pod("app", "b", "10.2.0.5", true)
	status := p.Status
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app"}}
	created, err := c2.CoreV1().Pods("app").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = status
	must(c2.CoreV1().Pods("app").UpdateStatus(ctx, created, metav1.UpdateOptions{}))
	must(c2.DiscoveryV1().EndpointSlices("app").Create(ctx, slice("app", "web-x", 9191, map[string]string{"b": "10.2.0.5"}), metav1.CreateOptions{}))

	m := New("cluster1", "net1")
	done := make(chan error, 1)
	go func() { done <- NewKube(c1, KubeConfig{Cluster: "cluster1", Network: "net1"}).Run(ctx, m) }()
	defer func() { cancel(); <-done }()
	eventually(t, "sync", m.Synced)
	vip := svc1.Spec.ClusterIP + ":90"
	if _, r := m.Resolve(addr(vip)); r != NoEndpoint {
		t.Fatalf("before the remote secret, %s: %v, want %v", vip, r, NoEndpoint)
	}

	secret := remoteSecret("cluster2")
	secret.Data = map[string][]byte{"cluster2": testenv.Kubeconfig(t, "cluster2", cfg2)}
	must(c1.CoreV1().Secrets("istio-system").Create(ctx, secret, metav1.CreateOptions{}))
	eventually(t, "cluster 2's endpoint behind cluster 1's ClusterIP", func() bool {
		up, r := m.Resolve(addr(vip))
		return r == Found && up.Addr == addr("10.2.0.5:9191") && up.Identity.String() == "spiffe://cluster.local/ns/app/sa/sa-b" && up.HBONE
	})

	must(nil, c1.CoreV1().Secrets("istio-system").Delete(ctx, secret.Name, metav1.DeleteOptions{}))
	eventually(t, "cluster 2 forgotten", func() bool {
		_, r := m.Resolve(addr(vip))
		return r == NoEndpoint && len(m.Dump().Workloads) == 0
	})
}
