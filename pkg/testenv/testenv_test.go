package testenv_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshctl/meshctl/pkg/testenv"
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
