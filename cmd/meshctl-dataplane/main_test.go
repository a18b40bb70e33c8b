package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the dataplane binary small: what it links runs four times
// on every node, so none of meshctl's CLI, kind or Helm may creep in
// (through cmd/meshctl/app, pkg/cluster, pkg/install, …).
func TestDeps(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"sigs.k8s.io/kind", "helm.sh/", "github.com/spf13/cobra", "github.com/spf13/viper",
			"github.com/google/go-containerregistry", "github.com/meshctl/meshctl/cmd/meshctl/",
			"github.com/meshctl/meshctl/pkg/cluster", "github.com/meshctl/meshctl/pkg/install",
			"github.com/meshctl/meshctl/pkg/mesh",
		} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("meshctl-dataplane links %s", dep)
			}
		}
	}
}
