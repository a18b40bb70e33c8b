package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The manifests are raw strings with other constants spliced in, across
// files, as kind writes them.
func TestStringConstEvaluatesAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	a := write(t, dir, "a.go", "package nodeimage\n\nconst image = \"docker.io/kindest/kindnetd:v1\"\n\nvar images = []string{image}\n")
	b := write(t, dir, "b.go", "package nodeimage\n\nconst manifest = `\nkind: DaemonSet\n  image: ` + image + `\n`\n\nconst port = 53\n")
	got, err := stringConst("manifest", []string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nkind: DaemonSet\n  image: docker.io/kindest/kindnetd:v1\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, name := range []string{"missing", "images", "port"} {
		if _, err := stringConst(name, []string{a, b}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err %v, want one naming it", name, err)
		}
	}
}

func TestStringConstReportsBrokenSource(t *testing.T) {
	dir := t.TempDir()
	bad := write(t, dir, "bad.go", "package nodeimage\n\nconst manifest = undefined + `x`\n")
	if _, err := stringConst("manifest", []string{bad}); err == nil || !strings.Contains(err.Error(), "bad.go") {
		t.Errorf("err %v, want one naming bad.go", err)
	}
}
