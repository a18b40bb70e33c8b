package meshtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A log that cannot be written is an error of the collection, not a silent
// gap in the artifacts.
func TestCollectLogsReportsUnwritableLog(t *testing.T) {
	dir := t.TempDir()
	// "logs" as a file: the pod's log directory cannot be made under it.
	if err := os.WriteFile(filepath.Join(dir, "logs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "echo"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name:  "echo",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		}}},
	}
	c := &Cluster{Name: "c1", Kube: fake.NewClientset(pod)}
	if err := c.collectLogs(context.Background(), dir, pod); err == nil {
		t.Fatal("collectLogs succeeded although the log's directory could not be made")
	}
}
