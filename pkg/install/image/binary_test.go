package image

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestFind: meshctl-dataplane next to the running meshctl first, then on
// PATH, then meshctl itself with a notice saying how to get the smaller
// image; a meshctl-dataplane from another build is passed over, named in
// the notice.
func TestFind(t *testing.T) {
	t.Parallel()
	touch := func(path string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("binary"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	root := t.TempDir()
	exe := touch(filepath.Join(root, "bin", "meshctl"))
	beside := filepath.Join(root, "bin", DataplaneBinaryName)
	onPath := touch(filepath.Join(root, "path", DataplaneBinaryName))
	stale := touch(filepath.Join(root, "stale", DataplaneBinaryName))
	touch(beside)
	noBeside := filepath.Join(root, "alone", "meshctl")
	touch(noBeside)
	dirBeside := touch(filepath.Join(root, "dir", "meshctl"))
	if err := os.Mkdir(filepath.Join(root, "dir", DataplaneBinaryName), 0o755); err != nil {
		t.Fatal(err)
	}

	look := func(p string) func(string) (string, error) {
		return func(name string) (string, error) {
			if name != DataplaneBinaryName {
				t.Errorf("looked up %q on PATH", name)
			}
			if p == "" {
				return "", errors.New("not found")
			}
			return p, nil
		}
	}
	same := func(_, c string) (bool, string) {
		if c == stale {
			return false, "meshctl@v0.1.0, not meshctl@v0.2.0"
		}
		return true, ""
	}
	tests := []struct {
		name       string
		exe        string
		path       string // what PATH finds ("" nothing)
		want       string
		wantNotice []string // "" entries: no notice
	}{
		{"beside the executable wins over PATH", exe, onPath, beside, nil},
		{"PATH when none beside", noBeside, onPath, onPath, nil},
		{"a directory beside is no binary", dirBeside, onPath, onPath, nil},
		{"meshctl itself when none anywhere", noBeside, "", noBeside,
			[]string{"from meshctl itself (" + noBeside + ")", "go install github.com/meshctl/meshctl/cmd/meshctl-dataplane@"}},
		{"another build's is passed over", noBeside, stale, noBeside,
			[]string{"from meshctl itself", "passed over", stale, "v0.1.0, not meshctl@v0.2.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := finder{exe: func() (string, error) { return tt.exe, nil }, lookPath: look(tt.path), sameBuild: same}
			got, notice, err := f.find()
			if err != nil || got != tt.want {
				t.Fatalf("find() = %q, %v; want %q", got, err, tt.want)
			}
			if len(tt.wantNotice) == 0 && notice != "" {
				t.Errorf("notice %q, want none", notice)
			}
			for _, w := range tt.wantNotice {
				if !strings.Contains(notice, w) {
					t.Errorf("notice %q does not say %q", notice, w)
				}
			}
			if strings.Contains(notice, "\n") {
				t.Errorf("notice %q is more than one line", notice)
			}
		})
	}

	f := finder{exe: func() (string, error) { return "", errors.New("no /proc") }, lookPath: look(onPath), sameBuild: same}
	if _, _, err := f.find(); err == nil || !strings.Contains(err.Error(), "no /proc") {
		t.Errorf("find() without an executable: %v", err)
	}
}

// TestNewFindsBinary: New without WithBinary packages what the finder
// finds (here meshctl-dataplane beside a stand-in meshctl) and names it in
// the image as the dataplane binary.
func TestNewFindsBinary(t *testing.T) {
	t.Parallel()
	dp := staticBinaryNamed(t, DataplaneBinaryName)
	f := finder{
		exe:       func() (string, error) { return filepath.Join(filepath.Dir(dp), "meshctl"), nil },
		lookPath:  func(string) (string, error) { return "", errors.New("not found") },
		sameBuild: func(string, string) (bool, string) { return true, "" },
	}
	path, notice, err := f.find()
	if err != nil || path != dp || notice != "" {
		t.Fatalf("find() = %q, %q, %v; want %s", path, notice, err, dp)
	}
	img, err := New(WithBinary(path))
	if err != nil {
		t.Fatal(err)
	}
	if img.Binary() != dp || img.Entrypoint() != DataplaneBinaryPath {
		t.Errorf("image of %s at %s, want %s at %s", img.Binary(), img.Entrypoint(), dp, DataplaneBinaryPath)
	}
}

// TestSameBuild reads real build information: a binary matches itself,
// and a file Go did not build matches nothing.
func TestSameBuild(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := sameBuild(exe, exe); !ok {
		t.Errorf("sameBuild(self, self) = false: %s", why)
	}
	text := filepath.Join(t.TempDir(), DataplaneBinaryName)
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if ok, why := sameBuild(exe, text); ok || !strings.Contains(why, "no Go build information") {
		t.Errorf("sameBuild(self, script) = %v, %q", ok, why)
	}
}

// TestBuildKey: two commands of one build of meshctl match whatever their
// debug flags; another revision, a modified tree or another stamped
// version does not.
func TestBuildKey(t *testing.T) {
	t.Parallel()
	parse := func(path, version, ldflags, rev, modified string) *debug.BuildInfo {
		t.Helper()
		s := "path\t" + path + "\nmod\tgithub.com/meshctl/meshctl\t" + version + "\t\n" +
			"build\t-ldflags=" + quote(ldflags) + "\nbuild\tvcs.revision=" + rev + "\nbuild\tvcs.modified=" + modified + "\n"
		bi, err := debug.ParseBuildInfo(s)
		if err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
		return bi
	}
	const x = "-X github.com/meshctl/meshctl/pkg/version.Version="
	meshctl := parse("github.com/meshctl/meshctl/cmd/meshctl", "(devel)", x+"e90c8a5", "e90c8a5", "false")
	for _, tt := range []struct {
		name string
		bi   *debug.BuildInfo
		same bool
	}{
		{"the dataplane of the same build, stripped", parse("github.com/meshctl/meshctl/cmd/meshctl-dataplane", "(devel)", "-s -w "+x+"e90c8a5", "e90c8a5", "false"), true},
		{"another stamped version", parse("github.com/meshctl/meshctl/cmd/meshctl-dataplane", "(devel)", x+"v0.1.0", "e90c8a5", "false"), false},
		{"another revision", parse("github.com/meshctl/meshctl/cmd/meshctl-dataplane", "(devel)", x+"e90c8a5", "576ca31", "false"), false},
		{"a modified tree", parse("github.com/meshctl/meshctl/cmd/meshctl-dataplane", "(devel)", x+"e90c8a5", "e90c8a5", "true"), false},
		{"another module version", parse("github.com/meshctl/meshctl/cmd/meshctl-dataplane", "v0.1.0", x+"e90c8a5", "e90c8a5", "false"), false},
	} {
		if got := buildKey(tt.bi) == buildKey(meshctl); got != tt.same {
			t.Errorf("%s: same = %v (%q vs %q)", tt.name, got, buildKey(tt.bi), buildKey(meshctl))
		}
	}
}

func quote(s string) string {
	if strings.ContainsAny(s, " \t") {
		return `"` + s + `"`
	}
	return s
}

func TestIsDataplaneBinary(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]bool{
		"/x/meshctl-dataplane":             true,
		"/x/meshctl-dataplane-linux-arm64": true,
		"/x/meshctl":                       false,
		"/x/meshctl-linux-amd64":           false,
	} {
		if got := isDataplaneBinary(path); got != want {
			t.Errorf("isDataplaneBinary(%s) = %v", path, got)
		}
	}
}
