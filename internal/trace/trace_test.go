package trace

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTrace: with MESHCTL_TRACE set, steps, the end and Kubernetes
// requests are appended one line each, "<start µs> <duration µs> <what>
// <detail>", a request's start being its end less its duration.
func TestTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace")
	t.Setenv(Env, path)
	if !Enabled() {
		t.Fatal("not enabled with MESHCTL_TRACE set")
	}
	Step("Checking Docker")
	kubeLatency{}.Observe(context.Background(), "GET", url.URL{Host: "127.0.0.1:6443", Path: "/api/v1/nodes"}, 250*time.Millisecond)
	End()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), b)
	}
	for i, want := range []string{" 0 step Checking Docker", " 250000 kube GET 127.0.0.1:6443/api/v1/nodes", " 0 end"} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("line %d = %q, want …%q", i, lines[i], want)
		}
	}
	var step, kube int64
	if _, err := fmt.Sscan(lines[0], &step); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(lines[1], &kube); err != nil {
		t.Fatal(err)
	}
	if kube > step {
		t.Errorf("the request began at %d, after the step it ended in (%d): its start is not back-dated", kube, step)
	}
}
