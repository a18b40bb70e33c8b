package testenv_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshctl/meshctl/internal/testenv"
)

func TestIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping integration test in -short mode")
	}
	t0 := time.Now()
	cfg := testenv.New(t)
	t.Logf("environment up in %s", time.Since(t0).Round(time.Millisecond))
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// As in every real cluster, Service default/kubernetes is there when
	// New returns (kube-apiserver creates it some time after /readyz).
	if _, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
		t.Fatalf("Service default/kubernetes right after New: %v", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshctl-testenv", Labels: map[string]string{"app": "meshctl"}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	got, err := cs.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get namespace: %v", err)
	}
	if got.Labels["app"] != "meshctl" || got.UID == "" {
		t.Fatalf("namespace read back wrong: %+v", got.ObjectMeta)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver %s; namespace %s uid %s", v.GitVersion, got.Name, got.UID)
}

// LoadBalancer gives a Service created after it started its address, and
// returns once its context ends.
func TestIntegrationLoadBalancer(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping integration test in -short mode")
	}
	cfg := testenv.New(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lbCtx, stopLB := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- testenv.LoadBalancer(lbCtx, cfg, "default", "gw", "192.0.2.7") }()

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gw"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 15443}}}}
	if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := cs.CoreV1().Services("default").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ing := got.Status.LoadBalancer.Ingress; len(ing) > 0 {
			if len(ing) != 1 || ing[0].IP != "192.0.2.7" {
				t.Fatalf("ingress %+v, want 192.0.2.7 only", ing)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the Service never got an address")
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopLB()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("LoadBalancer: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("LoadBalancer did not return after its context ended")
	}
}

// BenchmarkStart: starting etcd + kube-apiserver to /readyz (and Service
// default/kubernetes), with the CPU each used to get there — the start-up
// cost every kind node's control plane pays too, with testenv's flags
// rather than kubeadm's:
//
//	go test -run '^$' -bench Start -benchtime 5x ./internal/testenv
func BenchmarkStart(b *testing.B) {
	if _, _, err := testenv.Binaries(); err != nil {
		b.Skip(err)
	}
	var ready time.Duration
	cpu := map[string]time.Duration{}
	n := 0
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		env, err := testenv.Start(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		c, err := env.CPU()
		_ = env.Stop()
		if err != nil {
			b.Fatal(err)
		}
		if len(c) != 2 || c["etcd"] <= 0 || c["kube-apiserver"] <= 0 {
			b.Fatalf("CPU by process: %v (want etcd and kube-apiserver, each above zero)", c)
		}
		ready += env.StartTime
		for k, v := range c {
			cpu[k] += v
		}
		n++
	}
	b.ReportMetric(ready.Seconds()/float64(n), "ready-s/op")
	for k, v := range cpu {
		b.ReportMetric(v.Seconds()/float64(n), k+"-cpu-s/op")
	}
}
