package meshtest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// TestIntegrationParallelProcesses runs a suite (testdata/parallel) with the
// ginkgo CLI in three parallel processes, against a real kube-apiserver
// named as an existing cluster: the environment is set up once, by process 1;
// every process gets clients for the same cluster; and it is torn down only
// after every process has run its specs. (One cluster: two test apiservers
// share a service range, which one network cannot have.)
func TestIntegrationParallelProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: starts a kube-apiserver and runs ginkgo")
	}
	kc := kubeconfigFor(testenv.NewWithControllers(t, "serviceaccount-token-controller"))
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "east.kubeconfig")
	if err := os.WriteFile(file, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", file)
	if err != nil {
		t.Fatal(err)
	}
	east := kubernetes.NewForConfigOrDie(cfg)
	topo := []map[string]any{{"kind": "Kubernetes", "clusterName": "east", "network": "net-1", "meta": map[string]any{"kubeconfig": file}}}
	topoFile := filepath.Join(dir, "topology.json")
	data, _ := json.Marshal(topo)
	if err := os.WriteFile(topoFile, data, 0o600); err != nil {
		t.Fatal(err)
	}

	ginkgoCLI := filepath.Join(dir, "ginkgo")
	// GOFLAGS cleared: a caller's -race or -cover is not the suite's.
	goEnv := append(os.Environ(), "GOFLAGS=")
	build := exec.Command("go", "build", "-o", ginkgoCLI, "github.com/onsi/ginkgo/v2/ginkgo")
	build.Env = goEnv
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the ginkgo CLI: %v\n%s", err, b)
	}
	run := exec.Command(ginkgoCLI, "-p", "--procs", "3", "--no-color", "./testdata/parallel")
	run.Env = append(goEnv,
		"MESHTEST_TOPOLOGY="+topoFile,
		"MESHTEST_ENV=mp",
		"MESHTEST_ARTIFACTS="+filepath.Join(dir, "artifacts"),
		"MESHTEST_PARALLEL_OUT="+out,
		"DOCKER_HOST=unix:///nonexistent/docker.sock", // existing clusters need no Docker
	)
	b, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("ginkgo -p: %v\n%s", err, b)
	}
	t.Logf("ginkgo -p:\n%s", b)

	// Every process attached to the same clusters.
	var first map[string]string
	pids := map[int]int{}
	for p := 1; p <= 3; p++ {
		raw, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("process-%d.json", p)))
		if err != nil {
			t.Fatalf("process %d did not attach: %v", p, err)
		}
		var seen struct {
			PID         int               `json:"pid"`
			Kubeconfigs map[string]string `json:"kubeconfigs"`
		}
		if err := json.Unmarshal(raw, &seen); err != nil {
			t.Fatal(err)
		}
		pids[seen.PID] = p
		if len(seen.Kubeconfigs) != 1 || seen.Kubeconfigs["east"] == "" {
			t.Errorf("process %d has clusters %v, want east", p, seen.Kubeconfigs)
		}
		if first == nil {
			first = seen.Kubeconfigs
		} else if !maps.Equal(first, seen.Kubeconfigs) {
			t.Errorf("process %d has %v, process 1 %v", p, seen.Kubeconfigs, first)
		}
	}
	// Only process 1 ran meshctl's steps.
	logs, _ := filepath.Glob(filepath.Join(out, "steps-*.log"))
	var stepsBy []int
	for _, f := range logs {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(strings.TrimSpace(string(raw))) == 0 {
			continue
		}
		var pid int
		fmt.Sscanf(filepath.Base(f), "steps-%d.log", &pid)
		stepsBy = append(stepsBy, pids[pid])
	}
	if len(stepsBy) != 1 || stepsBy[0] != 1 {
		t.Errorf("meshctl's steps ran in processes %v, want only in process 1", stepsBy)
	}
	// The teardown ran, after every process's specs (which saw the claim).
	_, err = east.CoreV1().ConfigMaps(model.ClaimNamespace).Get(context.Background(), model.ClaimName, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("claim after the suite: %v, want it removed by the teardown", err)
	}
}
