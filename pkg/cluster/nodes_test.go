package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
)

// kubeconfigFor turns a rest.Config into the kubeconfig bytes that status
// reads from kind.
func kubeconfigFor(t *testing.T, cfg *rest.Config) []byte {
	t.Helper()
	c := clientcmdapi.NewConfig()
	c.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile}
	c.AuthInfos["c"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile, Token: cfg.BearerToken}
	c.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "c"}
	c.CurrentContext = "c"
	data, err := clientcmd.Write(*c)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestIntegrationNodeReader reads nodes from a real kube-apiserver.
func TestIntegrationNodeReader(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := testenv.New(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range []struct {
		name, role string
		ready      corev1.ConditionStatus
		cidrs      []string
	}{
		{"c1-control-plane", "control-plane", corev1.ConditionTrue, []string{"10.10.0.0/24", "fd00:10:10::/64"}},
		{"c1-worker", "", corev1.ConditionFalse, []string{"10.10.1.0/24"}},
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{}}, Spec: corev1.NodeSpec{PodCIDR: n.cidrs[0], PodCIDRs: n.cidrs}}
		if n.role != "" {
			node.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: n.ready, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.9"}, {Type: corev1.NodeHostName, Address: n.name}}
		created.Status.NodeInfo.KubeletVersion = "v1.34.4"
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := apiNodeReader{}.Nodes(ctx, kubeconfigFor(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d nodes", len(got))
	}
	cp, w := got[0], got[1]
	if cp.Name != "c1-control-plane" || cp.Role != "control-plane" || !cp.Ready || len(cp.PodCIDRs) != 2 || cp.IPs[0] != "172.18.0.9" || cp.Version != "v1.34.4" {
		t.Errorf("control plane: %+v", cp)
	}
	if w.Role != "worker" || w.Ready {
		t.Errorf("worker: %+v", w)
	}
	if _, err := (apiNodeReader{}).Nodes(ctx, []byte("not a kubeconfig")); err == nil {
		t.Error("a bad kubeconfig was accepted")
	}
}

// TestIntegrationSystemReader reads kube-system's workloads from a real
// kube-apiserver: a DaemonSet short of a ready pod and a Deployment
// without one are named, until their status says they are ready.
func TestIntegrationSystemReader(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := testenv.New(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kc := kubeconfigFor(t, cfg)
	if got, err := (apiNodeReader{}).System(ctx, kc); err != nil || len(got) != 0 {
		t.Fatalf("empty kube-system: %q, %v", got, err)
	}
	labels := map[string]string{"k8s-app": "x"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	two := int32(2)
	ds, err := cs.AppsV1().DaemonSets("kube-system").Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kindnet"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := cs.AppsV1().Deployments("kube-system").Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No controllers run here: the statuses are set as theirs would be
	// while the node's pods come back.
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 1}
	if ds, err = cs.AppsV1().DaemonSets("kube-system").UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dep.Status = appsv1.DeploymentStatus{Replicas: 2, ReadyReplicas: 0}
	if dep, err = cs.AppsV1().Deployments("kube-system").UpdateStatus(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := apiNodeReader{}.System(ctx, kc)
	want := []string{"DaemonSet kube-system/kindnet: 1 of 2 pods ready", "Deployment kube-system/coredns: none of 2 pods ready"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q (%v), want %q", got, err, want)
	}
	// One ready CoreDNS pod serves names; every node needs its kindnet.
	ds.Status.NumberReady = 2
	if _, err = cs.AppsV1().DaemonSets("kube-system").UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dep.Status.ReadyReplicas = 1
	if _, err = cs.AppsV1().Deployments("kube-system").UpdateStatus(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := (apiNodeReader{}).System(ctx, kc); err != nil || len(got) != 0 {
		t.Fatalf("ready kube-system: %q, %v", got, err)
	}
}
