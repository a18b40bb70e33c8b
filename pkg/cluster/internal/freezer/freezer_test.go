package freezer

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestThawWalksTheTree(t *testing.T) {
	root := t.TempDir()
	c := filepath.Join(root, "docker", "abc")
	write(t, filepath.Join(c, "freezer.state"), "THAWED\n")
	write(t, filepath.Join(c, "kubelet.slice", "pod", "freezer.state"), "FROZEN\n")
	write(t, filepath.Join(c, "kubelet.slice", "other", "freezer.state"), "FREEZING\n")
	write(t, filepath.Join(c, "v2", "cgroup.freeze"), "1\n")
	write(t, filepath.Join(c, "v2b", "cgroup.freeze"), "0\n")

	got, err := Thaw(c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(c, "kubelet.slice", "other"),
		filepath.Join(c, "kubelet.slice", "pod"),
		filepath.Join(c, "v2"),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("thawed %q, want %q", got, want)
	}
	for f, w := range map[string]string{
		"freezer.state":                     "THAWED",
		"kubelet.slice/pod/freezer.state":   "THAWED",
		"kubelet.slice/other/freezer.state": "THAWED",
		"v2/cgroup.freeze":                  "0",
		"v2b/cgroup.freeze":                 "0",
	} {
		if g := read(t, filepath.Join(c, f)); g != w {
			t.Errorf("%s = %q, want %q", f, g, w)
		}
	}
}

func TestThawMissingDirIsNothing(t *testing.T) {
	got, err := Thaw(filepath.Join(t.TempDir(), "gone"))
	if err != nil || len(got) != 0 {
		t.Fatalf("Thaw(missing) = %q, %v; want nothing", got, err)
	}
}

func TestParse(t *testing.T) {
	v1 := t.TempDir()
	in := "12:net_cls,net_prio:/docker/abc\n6:freezer:/docker/abc\n0::/docker/abc\n1:cpu:/\n"
	got, err := parse(v1, bufio.NewScanner(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != filepath.Join(v1, "freezer", "docker", "abc") {
		t.Fatalf("v1: %q", got)
	}
	v2 := t.TempDir()
	write(t, filepath.Join(v2, "cgroup.controllers"), "cpu memory pids\n")
	got, err = parse(v2, bufio.NewScanner(strings.NewReader("0::/system.slice/docker-abc.scope\n")))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != filepath.Join(v2, "system.slice", "docker-abc.scope") {
		t.Fatalf("v2: %q", got)
	}
}

// TestThawRealCgroup freezes a real process in a real cgroup, as an
// interrupted runc leaves one, and checks that Thaw lets it be killed.
func TestThawRealCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: needs root and a freezer cgroup")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a cgroup")
	}
	var dir, stateFile, frozen, procs string
	switch {
	case exists(filepath.Join(Root, "freezer")):
		dir = filepath.Join(Root, "freezer", "meshctl-freezer-test-"+strconv.Itoa(os.Getpid()))
		stateFile, frozen, procs = "freezer.state", "FROZEN", "cgroup.procs"
	case exists(filepath.Join(Root, "cgroup.controllers")):
		dir = filepath.Join(Root, "meshctl-freezer-test-"+strconv.Itoa(os.Getpid()))
		stateFile, frozen, procs = "cgroup.freeze", "1", "cgroup.procs"
	default:
		t.Skip("no freezer cgroup hierarchy on this machine")
	}
	nested := filepath.Join(dir, "inner")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(nested, stateFile), []byte(map[string]string{"freezer.state": "THAWED", "cgroup.freeze": "0"}[stateFile]), 0)
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
		_ = os.Remove(nested)
		_ = os.Remove(dir)
	})
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := os.WriteFile(filepath.Join(nested, procs), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nested, stateFile), []byte(frozen), 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for read(t, filepath.Join(nested, stateFile)) != frozen && stateFile == "freezer.state" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Frozen, the process does not die of SIGKILL.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Fatal("a frozen process exited on SIGKILL: the test's cgroup is not frozen")
	case <-time.After(300 * time.Millisecond):
	}

	dirs, err := Dirs(Root, cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != 1 || dirs[0] != nested {
		t.Fatalf("Dirs = %q, want [%s]", dirs, nested)
	}
	thawed, err := Thaw(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(thawed) != 1 || thawed[0] != nested {
		t.Fatalf("thawed %q, want [%s]", thawed, nested)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not exit after its cgroup was thawed")
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
