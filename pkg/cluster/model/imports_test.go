package model

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// allowedImports are the only non-standard packages the model may import:
// it is data and pure functions over it (parse, default, validate, render),
// testable without Docker, a cluster or a network. Side effects belong to
// pkg/cluster and its internal packages.
var allowedImports = map[string]bool{
	"github.com/meshctl/meshctl/internal/fsutil": true, // bounded reads of the topology file
	"k8s.io/apimachinery/pkg/util/validation":    true, // DNS-1123 and label checks
	"sigs.k8s.io/kind/pkg/apis/config/defaults":  true, // kind's default node image
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4":  true, // the kind config the model renders
	"sigs.k8s.io/yaml":                           true,
}

// forbiddenStd are standard packages that mean side effects beyond reading
// a file: running programs, talking to servers.
var forbiddenStd = map[string]bool{"os/exec": true, "net/http": true, "syscall": true}

// forbiddenDeps must not be reached even indirectly: Docker, kind's
// cluster provider, Kubernetes clients, meshctl's lifecycle packages.
var forbiddenDeps = []string{
	"os/exec",
	"net/http",
	"k8s.io/client-go",
	"sigs.k8s.io/kind/pkg/cluster",
	"sigs.k8s.io/kind/pkg/exec",
	"github.com/docker",
	"github.com/meshctl/meshctl/pkg/kubeclient",
	"github.com/meshctl/meshctl/pkg/cluster/internal",
}

// TestModelImportsNoSideEffects keeps the model pure: its own imports are
// the standard library (minus exec and HTTP) and allowedImports.
func TestModelImportsNoSideEffects(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fs := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(fs, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range parsed.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			std := !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
			switch {
			case std && forbiddenStd[path]:
				t.Errorf("%s imports %s: the model must not run programs or talk to servers (put it in pkg/cluster)", f, path)
			case !std && !allowedImports[path]:
				t.Errorf("%s imports %s: the model may import only the standard library and %v (side effects go in pkg/cluster)", f, path, keys(allowedImports))
			}
		}
	}
}

// TestModelDependsOnNoSideEffects checks the transitive dependencies, which
// an allowed package could widen.
func TestModelDependsOnNoSideEffects(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	cmd := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", ".")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range forbiddenDeps {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("the model depends on %s (forbidden: %s)", dep, bad)
			}
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
