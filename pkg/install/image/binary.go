package image

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
)

// DataplaneBinaryName is the dataplane-only binary (cmd/meshctl-dataplane)
// the image is built from when meshctl finds it: a fraction of meshctl's
// size, because it leaves out the CLI, kind and Helm.
const DataplaneBinaryName = "meshctl-dataplane"

// finder looks for the binary to package; tests replace its parts.
type finder struct {
	exe      func() (string, error)
	lookPath func(string) (string, error)
	// sameBuild says whether candidate was built from the same meshctl
	// source as the running binary, and if not, what differs.
	sameBuild func(self, candidate string) (bool, string)
}

var defaultFinder = finder{exe: os.Executable, lookPath: exec.LookPath, sameBuild: sameBuild}

// find returns the binary to build the image from, and a one-line notice
// for the user when that is not the dataplane binary or when a dataplane
// binary was passed over. In order: meshctl-dataplane next to the running
// executable (`make build`, `go install …/cmd/...`), then on PATH, then the
// running executable itself, which serves as well (it has the same entry
// points under `meshctl dataplane`) in an image of meshctl's whole size.
// A meshctl-dataplane built from another meshctl version is passed over:
// the charts this meshctl installs may pass flags an older one rejects.
func (f finder) find() (path, notice string, err error) {
	exe, err := f.exe()
	if err != nil {
		return "", "", fmt.Errorf("dataplane image: finding own binary: %w", err)
	}
	var skipped []string
	candidates := []string{filepath.Join(filepath.Dir(exe), DataplaneBinaryName)}
	if p, err := f.lookPath(DataplaneBinaryName); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		candidates = append(candidates, p)
	}
	seen := map[string]bool{}
	for _, c := range candidates {
		if seen[c] || c == exe {
			continue
		}
		seen[c] = true
		if st, err := os.Stat(c); err != nil || !st.Mode().IsRegular() {
			continue
		}
		ok, why := f.sameBuild(exe, c)
		if ok {
			return c, "", nil
		}
		skipped = append(skipped, fmt.Sprintf("%s (%s)", c, why))
	}
	notice = fmt.Sprintf("building the dataplane image from meshctl itself (%s); for an image a fraction of the size, put %s next to meshctl or on PATH: `make build`, or go install github.com/meshctl/meshctl/cmd/%s@<this meshctl's version>",
		exe, DataplaneBinaryName, DataplaneBinaryName)
	if len(skipped) > 0 {
		notice += "; passed over, built from another meshctl: " + strings.Join(skipped, ", ")
	}
	return exe, notice, nil
}

// sameBuild compares what the Go toolchain recorded in both binaries: the
// module version, the VCS revision and whether the tree was modified, and
// the version stamped with -ldflags -X. A running binary without build
// information (none is expected) accepts any candidate.
func sameBuild(self, candidate string) (bool, string) {
	cand, err := buildinfo.ReadFile(candidate)
	if err != nil {
		return false, fmt.Sprintf("no Go build information: %v", err)
	}
	own, err := buildinfo.ReadFile(self)
	if err != nil {
		return true, ""
	}
	if a, b := buildKey(own), buildKey(cand); a != b {
		return false, fmt.Sprintf("%s, not %s", b, a)
	}
	return true, ""
}

var versionX = regexp.MustCompile(`-X[= ]?github\.com/meshctl/meshctl/pkg/version\.Version=([^\s'"]+)`)

// buildKey is what identifies a build of meshctl's source, whichever of its
// commands was built: debug flags like -s -w do not count.
func buildKey(bi *debug.BuildInfo) string {
	k := bi.Main.Path + "@" + bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision", "vcs.modified":
			k += " " + s.Key + "=" + s.Value
		case "-ldflags":
			if m := versionX.FindStringSubmatch(s.Value); m != nil {
				k += " version=" + m[1]
			}
		}
	}
	return k
}

// isDataplaneBinary says whether path is cmd/meshctl-dataplane, by the
// package path Go recorded in it or else by its file name: the image then
// names it so, which `ps` on a node shows.
func isDataplaneBinary(path string) bool {
	if bi, err := buildinfo.ReadFile(path); err == nil && strings.HasSuffix(bi.Path, "/cmd/"+DataplaneBinaryName) {
		return true
	}
	return strings.HasPrefix(filepath.Base(path), DataplaneBinaryName)
}
