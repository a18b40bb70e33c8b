package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestDeps keeps the dataplane binary small: what it links runs four times
// on every node, so none of meshctl's CLI, kind or Helm may creep in
// (through cmd/meshctl/app, pkg/cluster, pkg/install, …).
//
// It lists with the build tags the Makefile builds the image binary with:
// grpcnotrace keeps grpc-go from linking golang.org/x/net/trace, whose
// html/template (reflect.Value.Method) turns off the linker's dead-method
// elimination and nearly doubles the binary.
func TestDeps(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	build := regexp.MustCompile(`(?m)^\s.*build .* ./cmd/meshctl-dataplane$`).Find(mk)
	if build == nil {
		t.Fatal("Makefile has no build line for ./cmd/meshctl-dataplane")
	}
	args := []string{"list", "-deps"}
	if m := regexp.MustCompile(`-tags[ =](\S+)`).FindSubmatch(build); m != nil {
		args = append(args, "-tags", string(m[1]))
	}
	out, err := exec.Command("go", append(args, ".")...).Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"text/template", "html/template", "golang.org/x/net/trace",
			"sigs.k8s.io/kind", "helm.sh", "github.com/spf13/cobra", "github.com/spf13/viper",
			"github.com/google/go-containerregistry", "github.com/meshctl/meshctl/cmd/meshctl",
			"github.com/meshctl/meshctl/pkg/cluster", "github.com/meshctl/meshctl/pkg/install",
			"github.com/meshctl/meshctl/pkg/mesh", "github.com/meshctl/meshctl/pkg/meshtest",
		} {
			if within(dep, banned) {
				t.Errorf("meshctl-dataplane links %s", dep)
			}
		}
	}
}

// within says whether package path dep is banned or below it: whole path
// elements, so that banning pkg/mesh leaves pkg/meshca (the CA the signer
// and the proxy use) alone.
func within(dep, banned string) bool {
	return dep == banned || strings.HasPrefix(dep, banned+"/")
}
