// Package testbin builds small static Linux programs for tests that need a
// real executable (the dataplane image's binary) without building meshctl.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Static builds the Go program src (one main package file) with cgo off
// for Linux and returns its path, named name, in a test temporary
// directory. It skips the test where a Linux binary cannot be run.
func Static(t testing.TB, name, src string) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("builds a Linux binary for an image that runs it")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, file)
	cmd.Dir = dir
	// GOFLAGS cleared: a caller's -race or -cover would need cgo or
	// rebuild the standard library for nothing.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building a static test binary: %v\n%s", err, b)
	}
	return out
}
