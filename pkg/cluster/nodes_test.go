package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
// kube-apiserver: a DaemonSet short of a ready pod on a node and a
// Deployment without one are named; a pod the API still shows Ready from
// before its node's restart (its containers started before the node) does
// not count, one whose containers started since does; the controller
// manager and the scheduler must have renewed their leader leases since.
// A static pod's Ready condition (kubeadm's startup probes first look
// after 10 s) is not judged.
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
	if got, err := (apiNodeReader{}).System(ctx, kc, nil); err != nil || len(got) != 0 {
		t.Fatalf("empty kube-system: %q, %v", got, err)
	}
	const ns = "kube-system"
	labels := map[string]string{"k8s-app": "x"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	two := int32(2)
	ds, err := cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kindnet"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No controllers run here: statuses are set as theirs and the
	// kubelet's would be. The DaemonSet's own status says all is ready,
	// as it still does right after a restart.
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 2}
	if _, err = cs.AppsV1().DaemonSets(ns).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dep, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	owner := func(kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: &yes}}
	}
	rs, err := cs.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "coredns-66bc5c9577", OwnerReferences: owner("Deployment", dep.Name, dep.UID)},
		Spec: appsv1.ReplicaSetSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restart := time.Date(2026, 12, 7, 15, 0, 0, 500_000_000, time.UTC) // node2's container started
	before, after := metav1.NewTime(restart.Add(-time.Minute)), metav1.NewTime(restart.Add(2*time.Second))
	pod := func(name, node string, refs []metav1.OwnerReference, ready bool, started metav1.Time) {
		t.Helper()
		p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: refs},
			Spec: corev1.PodSpec{NodeName: node, Containers: tmpl.Spec.Containers}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: ready, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}}
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// What the API shows right after node2's restart: every pod Ready, as
	// reported before it.
	pod("kindnet-a", "node1", owner("DaemonSet", ds.Name, ds.UID), true, before)
	pod("kindnet-b", "node2", owner("DaemonSet", ds.Name, ds.UID), true, before)
	pod("coredns-a", "node2", owner("ReplicaSet", rs.Name, rs.UID), true, before)
	pod("coredns-b", "node2", owner("ReplicaSet", rs.Name, rs.UID), false, before)
	pod("kube-scheduler-node2", "node2", []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node2", UID: "n2", Controller: &yes}}, true, before)
	// The scheduler's lease, last renewed by its incarnation before the
	// restart; the controller manager's not taken at all.
	lease := func(name string, renewed metav1.Time) {
		t.Helper()
		renew := metav1.NewMicroTime(renewed.Time)
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}
		if old, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			old.Spec.RenewTime = &renew
			_, err = cs.CoordinationV1().Leases(ns).Update(ctx, old, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if _, err := cs.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lease("kube-scheduler", before)
	started := map[string]time.Time{"node2": restart}
	got, err := apiNodeReader{}.System(ctx, kc, started)
	want := []string{"DaemonSet kube-system/kindnet: 1 of 2 pods ready", "Deployment kube-system/coredns: none of 2 pods ready",
		"kube-controller-manager has not taken its leader lease yet", "kube-scheduler has not renewed its leader lease since the node started"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("right after node2's restart: got %q (%v), want %q", got, err, want)
	}
	// Without the restart known, the same pods are all Ready.
	if got, err := (apiNodeReader{}).System(ctx, kc, nil); err != nil || len(got) != 0 {
		t.Fatalf("no restart known: %q, %v", got, err)
	}
	// The kubelet reports: kindnet runs again, one CoreDNS pod is Ready
	// (one serves names).
	for _, name := range []string{"kindnet-b", "coredns-b", "kube-scheduler-node2"} {
		if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	pod("kindnet-b2", "node2", owner("DaemonSet", ds.Name, ds.UID), true, after)
	pod("coredns-b2", "node2", owner("ReplicaSet", rs.Name, rs.UID), true, after)
	pod("kube-scheduler-node2", "node2", []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node2", UID: "n2", Controller: &yes}}, true, after)
	lease("kube-scheduler", after)
	lease("kube-controller-manager", after)
	if got, err := (apiNodeReader{}).System(ctx, kc, started); err != nil || len(got) != 0 {
		t.Fatalf("after the kubelet's report: %q, %v", got, err)
	}
}
