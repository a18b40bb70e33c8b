// Command runcwrap is the OCI runtime wrapper for hosts whose capability
// bounding set lacks CAP_SYS_RESOURCE (bit 24 clear in CapBnd), installed as
// /usr/local/sbin/runc-nocap-sysresource: dockerd's default runtime on the
// host and the CRI runc BinaryName of containerd in kind nodes.
//
// Asking runc for a capability the bounding set does not hold fails
// ("unable to apply caps"), and lowering oom_score_adj below the caller's
// value needs that capability too ("can't get final child's PID from pipe:
// EOF"). So, before it execs the real runc, it
//   - removes CAP_SYS_RESOURCE from the bundle's config.json
//     (runc create/run --bundle) and from exec process specs
//     (runc exec --process),
//   - raises a negative process.oomScoreAdj to 0.
//
// Where the bounding set holds CAP_SYS_RESOURCE it only execs runc.
//
// It replaced a shell script that ran jq once per create and exec: jq 1.6
// takes ≈ 33 CPU-ms to start, which made jq 2.5% of the machine's CPU while a
// kind cluster was being created (perf, 2026-12-06), and every `docker exec`
// and pod container waited for it. This is written by hand with the standard
// library because it only edits two fields of a JSON document.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capSysResource is CAP_SYS_RESOURCE's bit in the capability sets.
const capSysResource = 24

func main() {
	runc, err := realRunc()
	if err != nil {
		fatal(err)
	}
	if os.Getenv("RUNC_NOCAP_FORCE") == "" {
		held, err := boundingHolds(capSysResource)
		if err != nil {
			fatal(err)
		}
		if held {
			execRunc(runc)
		}
	}
	for _, s := range specs(os.Args[1:]) {
		if err := fixFile(s.path, s.inProcess); err != nil {
			fatal(err)
		}
	}
	execRunc(runc)
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "runc-nocap-sysresource: %v\n", err)
	os.Exit(1)
}

func execRunc(runc string) {
	argv := append([]string{runc}, os.Args[1:]...)
	fatal(fmt.Errorf("exec %s: %w", runc, syscall.Exec(runc, argv, os.Environ())))
}

// realRunc is $REAL_RUNC or the first runc binary found where Debian and the
// kind node put it.
func realRunc() (string, error) {
	if r := os.Getenv("REAL_RUNC"); r != "" {
		return r, nil
	}
	for _, r := range []string{"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc.real"} {
		if st, err := os.Stat(r); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return r, nil
		}
	}
	return "", fmt.Errorf("no real runc found (set REAL_RUNC)")
}

// boundingHolds reports whether this process's capability bounding set holds
// capability bit.
func boundingHolds(bit uint) (bool, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, fmt.Errorf("read capability bounding set: %w", err)
	}
	return capBndHolds(status, bit)
}

func capBndHolds(status []byte, bit uint) (bool, error) {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, fmt.Errorf("parse CapBnd %q: %w", strings.TrimSpace(v), err)
			}
			return set>>bit&1 == 1, nil
		}
	}
	return false, fmt.Errorf("no CapBnd line in /proc/self/status")
}

// spec is a JSON file to fix: a bundle's config.json, whose process object is
// under "process", or an exec process spec, which is the process object.
type spec struct {
	path      string
	inProcess bool
}

// specs finds the files runc will read in its arguments, as runc's flags
// spell them: --bundle DIR, -b DIR, --bundle=DIR, and the same for --process
// and -p with a file.
func specs(args []string) []spec {
	var out []spec
	prev := ""
	for _, a := range args {
		switch prev {
		case "--bundle", "-b":
			out = append(out, spec{filepath.Join(a, "config.json"), true})
		case "--process", "-p":
			out = append(out, spec{a, false})
		}
		if d, ok := strings.CutPrefix(a, "--bundle="); ok {
			out = append(out, spec{filepath.Join(d, "config.json"), true})
		}
		if f, ok := strings.CutPrefix(a, "--process="); ok {
			out = append(out, spec{f, false})
		}
		prev = a
	}
	return out
}

// fixFile rewrites path without CAP_SYS_RESOURCE and a negative oomScoreAdj;
// a file that does not exist is left to runc to complain about, and a file
// with nothing to change is not written.
func fixFile(path string, inProcess bool) error {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	out, changed, err := fix(data, inProcess)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !changed {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	tmp := path + ".nocap.tmp"
	if err := os.WriteFile(tmp, out, st.Mode().Perm()); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// fix edits one OCI document. Numbers are decoded as json.Number so values
// such as RLIM_INFINITY (2^64-1) survive unchanged.
func fix(data []byte, inProcess bool) ([]byte, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, false, fmt.Errorf("parse OCI spec: %w", err)
	}
	proc := doc
	if inProcess {
		p, ok := doc["process"].(map[string]any)
		if !ok {
			return data, false, nil
		}
		proc = p
	}
	changed := false
	if caps, ok := proc["capabilities"].(map[string]any); ok {
		for set, v := range caps {
			list, ok := v.([]any)
			if !ok {
				continue
			}
			kept := list[:0:0]
			for _, c := range list {
				if c != "CAP_SYS_RESOURCE" {
					kept = append(kept, c)
				}
			}
			if len(kept) != len(list) {
				caps[set] = kept
				changed = true
			}
		}
	}
	if n, ok := proc["oomScoreAdj"].(json.Number); ok {
		if v, err := n.Int64(); err == nil && v < 0 {
			proc["oomScoreAdj"] = json.Number("0")
			changed = true
		}
	}
	if !changed {
		return data, false, nil
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, false, fmt.Errorf("encode OCI spec: %w", err)
	}
	return out.Bytes(), true, nil
}
