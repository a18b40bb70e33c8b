package installer

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
)

var proxySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "meshctl-proxy"}}

// oneNodeDaemonSet is the proxy's DaemonSet on a one-node cluster right after
// Helm returned: scheduled and updated, not ready, maxUnavailable 1 — which
// Helm's readiness arithmetic (ready ≥ desired − maxUnavailable) accepts.
func oneNodeDaemonSet() *appsv1.DaemonSet {
	one := intstr.FromInt32(1)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "meshctl-proxy", Namespace: "istio-system", Generation: 1},
		Spec: appsv1.DaemonSetSpec{Selector: proxySelector, UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
			Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one}}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, UpdatedNumberScheduled: 1, NumberReady: 0},
	}
}

func pod(name string, waiting *corev1.ContainerStateWaiting, last *corev1.ContainerStateTerminated) *corev1.Pod {
	cs := corev1.ContainerStatus{Name: "proxy", State: corev1.ContainerState{Waiting: waiting}}
	if last != nil {
		cs.LastTerminationState.Terminated = last
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "istio-system", Labels: proxySelector.MatchLabels},
		Spec:       corev1.PodSpec{NodeName: "cluster1-control-plane"},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{cs},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}},
	}
}

var proxy = []Workload{{Kind: "DaemonSet", Namespace: "istio-system", Name: "meshctl-proxy"}}

// The failure: `up` returned with meshctl-proxy NumberReady 0 on a
// one-node cluster. Now it waits until the DaemonSet's own status says
// every pod is ready.
func TestWaitReadyWaitsForEveryDaemonSetPod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := fake.NewClientset(oneNodeDaemonSet(), pod("meshctl-proxy-abcde", &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}, nil))
	err := WaitReady(ctx, cs, proxy, 30*time.Millisecond, 5*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "DaemonSet istio-system/meshctl-proxy: 0 of 1 pods ready") {
		t.Fatalf("not ready yet: %v", err)
	}
	ds := oneNodeDaemonSet()
	ds.Status.NumberReady = 1
	if _, err := cs.AppsV1().DaemonSets("istio-system").UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := WaitReady(ctx, cs, proxy, time.Minute, 5*time.Millisecond); err != nil {
		t.Fatalf("ready: %v", err)
	}
}

// A spec the controller has not observed yet is not ready, whatever the
// old status says.
func TestWaitReadyWantsTheCurrentGeneration(t *testing.T) {
	t.Parallel()
	ds := oneNodeDaemonSet()
	ds.Generation, ds.Status.NumberReady = 2, 1
	err := WaitReady(context.Background(), fake.NewClientset(ds), proxy, 20*time.Millisecond, 5*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "has not seen the new spec") {
		t.Fatalf("err %v", err)
	}
}

// An image the node will never have fails at once, naming the pod, its
// node and the reason: no point waiting out the timeout.
func TestWaitReadyNamesAPodThatCannotStart(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset(oneNodeDaemonSet(), pod("meshctl-proxy-abcde", &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull",
		Message: `Container image "meshctl/dataplane:dev" is not present with pull policy of Never`}, nil))
	err := WaitReady(context.Background(), cs, proxy, time.Hour, 5*time.Millisecond)
	for _, want := range []string{"cannot become ready", "pod meshctl-proxy-abcde on cluster1-control-plane", "ErrImageNeverPull", "meshctl/dataplane:dev"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want it to say %q", err, want)
		}
	}
}

// A crash loop is reported at the timeout with the last termination
// message; a Deployment counts only when every replica is available.
func TestWaitReadyReportsACrashLoop(t *testing.T) {
	t.Parallel()
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "meshctl-signer", Namespace: "istio-system", Generation: 1},
		Spec:       appsv1.DeploymentSpec{Replicas: &one, Selector: proxySelector},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 0},
	}
	p := pod("meshctl-signer-xyz", &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container"},
		&corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "reading cacerts: open /etc/cacerts/ca-key.pem: no such file"})
	err := WaitReady(context.Background(), fake.NewClientset(d, p), []Workload{{Kind: "Deployment", Namespace: "istio-system", Name: "meshctl-signer"}}, 20*time.Millisecond, 5*time.Millisecond)
	for _, want := range []string{"Deployment istio-system/meshctl-signer: 0 of 1 replicas available", "CrashLoopBackOff", "last exit 1, Error: reading cacerts: open /etc/cacerts/ca-key.pem"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want it to say %q", err, want)
		}
	}
}

func TestWorkloadsOfAManifest(t *testing.T) {
	t.Parallel()
	ws, err := Workloads(`---
# Source: x/templates/sa.yaml
apiVersion: v1
kind: ServiceAccount
metadata: {name: a}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: meshctl-proxy
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: signer, namespace: other}
`, "istio-system")
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].String() != "DaemonSet istio-system/meshctl-proxy" || ws[1].String() != "Deployment other/signer" {
		t.Errorf("workloads %v", ws)
	}
}
