package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const bundleConfig = `{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["/pause"],
"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE","CAP_NET_ADMIN"],"effective":["CAP_SYS_RESOURCE"],"permitted":["CAP_CHOWN"]},
"rlimits":[{"type":"RLIMIT_NOFILE","hard":18446744073709551615,"soft":1048576}],"oomScoreAdj":-998},
"annotations":{"io.kubernetes.cri.container-type":"sandbox","x":"<a&b>"}}`

func decode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var v map[string]any
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return v
}

func TestFixBundle(t *testing.T) {
	out, changed, err := fix([]byte(bundleConfig), true)
	if err != nil || !changed {
		t.Fatalf("fix: changed=%v err=%v", changed, err)
	}
	got := decode(t, out)
	want := decode(t, []byte(bundleConfig))
	p := want["process"].(map[string]any)
	p["capabilities"] = map[string]any{
		"bounding":  []any{"CAP_CHOWN", "CAP_NET_ADMIN"},
		"effective": []any{},
		"permitted": []any{"CAP_CHOWN"},
	}
	p["oomScoreAdj"] = json.Number("0")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fixed spec:\n got %s\nwant %v", out, want)
	}
	if !strings.Contains(string(out), "18446744073709551615") || !strings.Contains(string(out), `"<a&b>"`) {
		t.Errorf("numbers or strings were re-encoded: %s", out)
	}
}

func TestFixProcessSpecUnchanged(t *testing.T) {
	in := `{"args":["sh"],"capabilities":{"bounding":["CAP_KILL"]},"oomScoreAdj":5}`
	out, changed, err := fix([]byte(in), false)
	if err != nil || changed || string(out) != in {
		t.Fatalf("fix of a spec with nothing to change: changed=%v err=%v out=%s", changed, err, out)
	}
	if _, _, err := fix([]byte("{not json"), false); err == nil {
		t.Fatal("fix accepted a broken document")
	}
}

func TestSpecs(t *testing.T) {
	got := specs([]string{"--root", "/run/runc", "create", "--bundle", "/b1", "-b", "/b2", "--bundle=/b3",
		"exec", "--process", "/p1.json", "-p", "/p2.json", "--process=/p3.json", "id"})
	want := []spec{{"/b1/config.json", true}, {"/b2/config.json", true}, {"/b3/config.json", true},
		{"/p1.json", false}, {"/p2.json", false}, {"/p3.json", false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("specs = %v, want %v", got, want)
	}
}

func TestCapBndHolds(t *testing.T) {
	for _, c := range []struct {
		status string
		want   bool
	}{
		{"Name:\tx\nCapBnd:\t000001fffeffffff\n", false},
		{"Name:\tx\nCapBnd:\t000001ffffffffff\n", true},
	} {
		got, err := capBndHolds([]byte(c.status), capSysResource)
		if err != nil || got != c.want {
			t.Errorf("capBndHolds(%q) = %v, %v; want %v", c.status, got, err, c.want)
		}
	}
	if _, err := capBndHolds([]byte("Name:\tx\n"), capSysResource); err == nil {
		t.Error("capBndHolds without a CapBnd line did not fail")
	}
}

// TestWrapperExecsRunc builds the wrapper and runs it in front of a stand-in
// runc that records its arguments and the bundle it was given: the file runc
// reads is fixed and every argument reaches it unchanged.
func TestWrapperExecsRunc(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "runc-nocap-sysresource")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fake := filepath.Join(dir, "runc")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" >\"$OUT/args\"\ncat \"$OUT/bundle/config.json\" >\"$OUT/seen\"\nexit 3\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bundle"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bundle", "config.json"), []byte(bundleConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--log-format", "json", "create", "--bundle", filepath.Join(dir, "bundle"), "ctr1")
	cmd.Env = append(os.Environ(), "REAL_RUNC="+fake, "RUNC_NOCAP_FORCE=1", "OUT="+dir)
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("the wrapper did not hand runc's exit status through: %v", err)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if want := "--log-format\njson\ncreate\n--bundle\n" + filepath.Join(dir, "bundle") + "\nctr1\n"; string(args) != want {
		t.Errorf("runc got arguments %q, want %q", args, want)
	}
	seen, _ := os.ReadFile(filepath.Join(dir, "seen"))
	if strings.Contains(string(seen), "CAP_SYS_RESOURCE") || !strings.Contains(string(seen), `"oomScoreAdj":0`) {
		t.Errorf("runc read an unfixed bundle: %s", seen)
	}
	if st, err := os.Stat(filepath.Join(dir, "bundle", "config.json")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("config.json mode changed or file gone: %v %v", st, err)
	}
}
