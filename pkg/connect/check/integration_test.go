package check

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

type oneCluster struct{ kubeconfig []byte }

func (s oneCluster) Environment(context.Context, string) ([]model.ClusterState, error) {
	return []model.ClusterState{{ClusterPlan: model.ClusterPlan{Name: "c1", KindName: "it-c1", Network: "network-1"}}}, nil
}

func (s oneCluster) ClusterKubeconfig(context.Context, model.ClusterPlan, bool) ([]byte, error) {
	return s.kubeconfig, nil
}

// TestIntegrationServerObjects creates the check's objects on a real API
// server, which validates them (the dual-stack Service policy, the pod
// specs), with kube-controller-manager's namespace controller so that
// namespaces really go. A stale check namespace is removed first. testenv
// runs no scheduler or kubelet, so the server pod never runs: the check must
// end with an error naming the cluster and saying what it waited for, not
// hang, and still delete its namespace.
func TestIntegrationServerObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := testenv.NewWithControllers(t, "namespace-controller")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c1"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["c1"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c1"] = &clientcmdapi.Context{Cluster: "c1", AuthInfo: "c1"}
	kc.CurrentContext = "c1"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := kubernetes.NewForConfigOrDie(cfg)
	// What an interrupted run leaves behind.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DefaultNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps(DefaultNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stale"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	seenc := make(chan *corev1.Service, 1)
	c := New(oneCluster{data}, WithTimeout(20*time.Second))
	c.poll = 100 * time.Millisecond
	checking, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Read the Service while the check waits for its pod.
		for checking.Err() == nil {
			if s, err := client.CoreV1().Services(DefaultNamespace).Get(ctx, serverName, metav1.GetOptions{}); err == nil {
				seenc <- s
				if _, err := client.CoreV1().ConfigMaps(DefaultNamespace).Get(ctx, "stale", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("the stale namespace was not removed first (configmap: %v)", err)
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	_, err = c.Check(ctx, "it")
	stopWatching()
	<-done
	if err == nil || !strings.Contains(err.Error(), `cluster "c1"`) || !strings.Contains(err.Error(), "waiting for server pod meshctl-check/server to run") {
		t.Fatalf("err = %v, want a timeout naming cluster c1 and the server pod", err)
	}
	var seen *corev1.Service
	select {
	case seen = <-seenc:
	default:
	}
	if seen == nil || len(seen.Spec.ClusterIPs) != 1 || !strings.HasPrefix(seen.Spec.ClusterIPs[0], "10.0.0.") {
		t.Errorf("service %v, want one address from the single-stack range", seen)
	}
	// No pod left, the namespace deleting (the check does not wait for the
	// namespace controller), and gone soon after.
	if pods, err := client.CoreV1().Pods(DefaultNamespace).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Errorf("pods left after the check: %v, %v", pods, err)
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, DefaultNamespace, metav1.GetOptions{})
	if err == nil && ns.DeletionTimestamp == nil {
		t.Errorf("the check's namespace is not being deleted after the check")
	}
	for err == nil && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		_, err = client.CoreV1().Namespaces().Get(ctx, DefaultNamespace, metav1.GetOptions{})
	}
	if !apierrors.IsNotFound(err) {
		t.Errorf("the check's namespace did not go: %v", err)
	}
}

// TestIntegrationGatewayPods: the server's side of a cross-network probe
// is matched by the addresses of the east-west gateway's pods, found by
// the chart's label in istio-system on a real API server; other pods
// there (the node proxies) are not gateways.
func TestIntegrationGatewayPods(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := kubernetes.NewForConfigOrDie(cfg)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: proxyNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, labels := range map[string]map[string]string{
		"istio-eastwestgateway-abc": {"app": "istio-eastwestgateway", "istio": "eastwestgateway"},
		"meshctl-proxy-xyz":         {"app.kubernetes.io/name": "meshctl-proxy"},
	} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: proxyNamespace, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}
		created, err := client.CoreV1().Pods(proxyNamespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := "10.20.0.9"
		if name == "istio-eastwestgateway-abc" {
			ip = "10.20.0.42"
		}
		created.Status.PodIP, created.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		if _, err := client.CoreV1().Pods(proxyNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := portForwardReader{}.gateways(ctx, &run{client: client})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].String() != "10.20.0.42" {
		t.Errorf("gateway pod addresses %v, want [10.20.0.42]", got)
	}
}
