package nodeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/enroll"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/zds"
)

// fakeProc lays out a procfs with one process per uid (cgroup lines as the
// kubelet's cgroupfs driver writes them), each netns a link to a real netns.
func fakeProc(t *testing.T, cgroups map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, cg := range cgroups {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ownNetns, filepath.Join(dir, "ns", "net")); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFindNetns(t *testing.T) {
	t.Parallel()
	root := fakeProc(t, map[string]string{
		"1":  "0::/init.scope\n",
		"42": "12:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1111_2222.slice/cri-containerd-abc.scope\n",
		"77": "5:cpu:/kubepods/burstable/pod3333-4444/0123abcd\n",
	})
	if err := os.Mkdir(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[string]string{"1111-2222": "42", "3333-4444": "77"} {
		got, err := findNetns(root, uid)
		if err != nil || got != filepath.Join(root, want, "ns", "net") {
			t.Errorf("findNetns(%s) = %q, %v; want process %s", uid, got, err, want)
		}
	}
	if _, err := findNetns(root, "9999"); !errors.Is(err, errNetnsNotFound) {
		t.Errorf("unknown pod: err = %v, want errNetnsNotFound", err)
	}
	if _, err := findNetns(filepath.Join(root, "missing"), "1111-2222"); err == nil {
		t.Error("missing procfs: no error")
	}
}

// Pods enrolled after their sandbox exists never pass through the CNI
// plugin as meshed: the agent finds their netns itself.
func TestAgentEnrollsRunningPods(t *testing.T) {
	t.Parallel()
	late := pod("later", "late", node)
	late.Status.PodIP = "10.244.0.42"
	late.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.42"}}
	labelled := pod("later", "labelled", node)
	labelled.Status.PodIP = "10.244.0.43"
	labelled.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.43"}}
	h := newHarness(t, namespace("later", false), late, labelled)
	proc := fakeProc(t, map[string]string{
		"100": "0::/kubepods/besteffort/poduid-late/c1\n",
		"200": "0::/kubepods/besteffort/poduid-labelled/c2\n",
	})
	h.start(WithProcRoot(proc))
	p := h.proxy()
	p.next(t) // SnapshotSent
	ctx := context.Background()

	// The pod itself opts in.
	pl, _ := h.client.CoreV1().Pods("later").Get(ctx, "labelled", metav1.GetOptions{})
	pl.Labels[enroll.DataplaneModeLabel] = enroll.DataplaneModeAmbient
	if _, err := h.client.CoreV1().Pods("later").Update(ctx, pl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := p.next(t); ev.Kind != zds.KindAdd || ev.UID != "uid-labelled" {
		t.Fatalf("proxy got %+v, want AddWorkload labelled", ev)
	}
	// Its namespace opts in: the other running pod follows.
	ns, _ := h.client.CoreV1().Namespaces().Get(ctx, "later", metav1.GetOptions{})
	ns.Labels[enroll.DataplaneModeLabel] = enroll.DataplaneModeAmbient
	if _, err := h.client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := p.next(t); ev.Kind != zds.KindAdd || ev.UID != "uid-late" {
		t.Fatalf("proxy got %+v, want AddWorkload late", ev)
	}
	p.quiet(t) // labelled is not added twice
	h.rules.mu.Lock()
	applied := append([]string(nil), h.rules.applied...)
	h.rules.mu.Unlock()
	if len(applied) != 2 || applied[1] != filepath.Join(proc, "100", "ns", "net") {
		t.Fatalf("rules applied in %v, want the procfs netns of each pod", applied)
	}
	if !h.probes.has("10.244.0.42") || !h.probes.has("10.244.0.43") {
		t.Fatal("running pods' IPs not exempted for probes")
	}
}
