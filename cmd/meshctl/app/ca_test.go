package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/meshca"
)

func TestCA(t *testing.T) {
	t.Parallel()
	artifacts := t.TempDir()
	ca := func(args ...string) meshca.Result {
		t.Helper()
		code, out, errOut := run(t, append([]string{"ca", "--artifacts", artifacts, "--env", "ci", "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var r meshca.Result
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		return r
	}
	summary := func(r meshca.Result) string {
		s := []string{r.Root.Action}
		for _, c := range r.Clusters {
			s = append(s, c.Cluster+"="+c.Action)
		}
		return strings.Join(s, " ")
	}
	r := ca("--clusters", "3", "--networks", "2")
	if got := summary(r); got != "created cluster1=created cluster2=created cluster3=created" {
		t.Errorf("first run: %s", got)
	}
	if want := filepath.Join(artifacts, "ci", "ca"); r.Dir != want {
		t.Errorf("dir %s, want %s", r.Dir, want)
	}
	for _, c := range r.Clusters {
		for name, path := range c.Files {
			if _, err := os.Stat(path); err != nil || filepath.Base(path) != name {
				t.Errorf("%s: %s: %v", c.Cluster, path, err)
			}
		}
	}
	if got := summary(ca("--clusters", "3")); got != "reused cluster1=reused cluster2=reused cluster3=reused" {
		t.Errorf("re-run: %s", got)
	}
	if got := summary(ca("--clusters", "3", "--rotate")); got != "rotated cluster1=rotated cluster2=rotated cluster3=rotated" {
		t.Errorf("--rotate: %s", got)
	}
	code, out, _ := run(t, "ca", "--artifacts", artifacts, "--env", "ci", "--topology", filepath.Join(testdata, "topology/valid-istio-multicluster-3.json"))
	if code != 0 || !strings.Contains(out, "cross-network-primary") || !strings.Contains(out, "created") {
		t.Errorf("text output for a topology: %d\n%s", code, out)
	}
}

func TestCABadInput(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"ca", "-o", "xml"}, `unknown output format "xml"`},
		{[]string{"ca", "--clusters", "0"}, `invalid argument "0" for "--clusters" flag: must be at least 1`},
		{[]string{"ca", "--root-lifetime", "0s", "--artifacts", t.TempDir()}, "CA lifetimes must be positive"},
	} {
		code, out, errOut := run(t, tt.args...)
		if code != 1 || out != "" || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q, want %q", tt.args, code, out, errOut, tt.want)
		}
	}
}
