package installcni

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshctl/meshctl/internal/syncbuf"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/testutil"
)

type env struct {
	conf, bin, sa, src string
	logs               *syncbuf.Buffer
	inst               *Installer
	stop               func() error
}

// start lays out host dirs the way the DaemonSet mounts them and runs the
// installer against them until the test stops it.
func start(t *testing.T, prepare func(e *env), opts ...Option) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{
		conf: filepath.Join(root, "net.d"), bin: filepath.Join(root, "bin"),
		sa: filepath.Join(root, "sa"), src: filepath.Join(root, "meshctl"),
		logs: &syncbuf.Buffer{},
	}
	for _, d := range []string{e.conf, e.bin, e.sa} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, e.src, "#!plugin-binary", 0o644)
	setToken(t, e.sa, "token-1")
	if prepare != nil {
		prepare(e)
	}
	e.inst = New(append([]Option{
		WithCNIConfDir(e.conf), WithHostCNIConfDir("/etc/cni/net.d"), WithCNIBinDir(e.bin),
		WithPluginBinary(e.src), WithServiceAccountDir(e.sa), WithAPIServer("https://10.96.0.1:443"),
		WithRepairThrottle(50 * time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(e.logs, nil))),
	}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.inst.Run(ctx) }()
	var once sync.Once
	var err error
	e.stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { e.stop() })
	return e
}

func mustWrite(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// setToken updates the service account dir as the kubelet does: new files
// in a fresh dir, then an atomic swap of the ..data symlink.
func setToken(t *testing.T, sa, token string) {
	t.Helper()
	ts := filepath.Join(sa, fmt.Sprintf("..%d", time.Now().UnixNano()))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(ts, "token"), token, 0o644)
	mustWrite(t, filepath.Join(ts, "ca.crt"), "CA-PEM", 0o644)
	tmp := filepath.Join(sa, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(sa, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"token", "ca.crt"} {
		link := filepath.Join(sa, f)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", f), link); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func pluginTypes(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var m struct{ Plugins []struct{ Type string } }
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	var out []string
	for _, p := range m.Plugins {
		out = append(out, p.Type)
	}
	return out
}

func chained(path string) bool {
	types := pluginTypes(path)
	return len(types) > 0 && types[len(types)-1] == "meshctl-cni"
}

const kindnet = `{"cniVersion":"0.3.1","name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`

func TestRunChainsConflistAndCleansUp(t *testing.T) {
	t.Parallel()
	var conf string
	e := start(t, func(e *env) {
		conf = filepath.Join(e.conf, "10-kindnet.conflist")
		mustWrite(t, conf, kindnet, 0o640)
		mustWrite(t, filepath.Join(e.bin, tmpPrefix+"meshctl-cni-123"), "half a binary", 0o600)
	})
	testutil.Eventually(t, "plugin chained", func() bool { return chained(conf) && e.inst.Ready() })
	if got := pluginTypes(conf); strings.Join(got, ",") != "ptp,portmap,meshctl-cni" {
		t.Errorf("plugins = %v", got)
	}
	data, _ := os.ReadFile(conf)
	var m map[string]any
	json.Unmarshal(data, &m)
	entry := m["plugins"].([]any)[2].(map[string]any)
	if entry["agent_socket"] != "/var/run/meshctl/pluginevent.sock" ||
		entry["kubernetes"].(map[string]any)["kubeconfig"] != "/etc/cni/net.d/meshctl-cni-kubeconfig" {
		t.Errorf("entry = %v", entry)
	}
	if st, _ := os.Stat(conf); st.Mode().Perm() != 0o640 {
		t.Errorf("config mode = %v, want 0640 kept", st.Mode().Perm())
	}
	bin := filepath.Join(e.bin, "meshctl-cni")
	if b, err := os.ReadFile(bin); err != nil || string(b) != "#!plugin-binary" {
		t.Errorf("plugin binary = %q, %v", b, err)
	}
	if st, _ := os.Stat(bin); st.Mode().Perm() != 0o755 {
		t.Errorf("binary mode = %v", st.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(e.bin, tmpPrefix+"meshctl-cni-123")); !os.IsNotExist(err) {
		t.Errorf("stale temp file not removed: %v", err)
	}
	kc := filepath.Join(e.conf, kubeconfigName)
	st, err := os.Stat(kc)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v, %v", st, err)
	}
	if b, _ := os.ReadFile(kc); !strings.Contains(string(b), `"token": "token-1"`) || !strings.Contains(string(b), "https://10.96.0.1:443") {
		t.Errorf("kubeconfig content:\n%s", b)
	}

	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	if got := pluginTypes(conf); strings.Join(got, ",") != "ptp,portmap" {
		t.Errorf("after cleanup plugins = %v", got)
	}
	for _, p := range []string{bin, kc} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s not removed on exit: %v", p, err)
		}
	}
	if e.inst.Ready() {
		t.Error("still ready after exit")
	}
}

func TestRunWrapsConfIntoConflist(t *testing.T) {
	t.Parallel()
	var conf string
	e := start(t, func(e *env) {
		conf = filepath.Join(e.conf, "10-bridge.conf")
		mustWrite(t, conf, `{"cniVersion":"1.0.0","name":"br","type":"bridge"}`, 0o600)
	})
	list := filepath.Join(e.conf, "10-bridge.conflist")
	// The conflist is written first, then the .conf removed: wait for both.
	testutil.Eventually(t, "conf wrapped and removed (it would win over ours)", func() bool {
		_, err := os.Stat(conf)
		return chained(list) && os.IsNotExist(err)
	})
	if got := pluginTypes(list); strings.Join(got, ",") != "bridge,meshctl-cni" {
		t.Errorf("plugins = %v", got)
	}
	if st, _ := os.Stat(list); st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want the .conf's 0600", st.Mode().Perm())
	}
}

func TestRunWaitsForPrimaryConfigAndSkipsInvalid(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	testutil.Eventually(t, "says it waits", func() bool { return strings.Contains(e.logs.String(), "waiting for the cluster's CNI") })
	mustWrite(t, filepath.Join(e.conf, "05-broken.conflist"), `{"name":"x","plugins":[]}`, 0o644)
	time.Sleep(200 * time.Millisecond)
	if e.inst.Ready() {
		t.Fatal("ready with only an invalid config")
	}
	if got := pluginTypes(filepath.Join(e.conf, "05-broken.conflist")); len(got) != 0 {
		t.Fatalf("invalid config was modified: %v", got)
	}
	conf := filepath.Join(e.conf, "10-kindnet.conflist")
	mustWrite(t, conf, kindnet, 0o644)
	testutil.Eventually(t, "chained once a config appears", func() bool { return chained(conf) && e.inst.Ready() })
}

func TestRunRepairsAgainstRacingWriter(t *testing.T) {
	t.Parallel()
	var conf string
	e := start(t, func(e *env) {
		conf = filepath.Join(e.conf, "10-kindnet.conflist")
		mustWrite(t, conf, kindnet, 0o644)
	})
	testutil.Eventually(t, "chained", func() bool { return chained(conf) })
	// Another CNI keeps rewriting its config without our entry, as kindnet
	// does on restart; the last version it writes carries a new setting.
	for i := range 30 {
		body := strings.Replace(kindnet, `"host-local"`, fmt.Sprintf(`"host-local","round":%d`, i), 1)
		mustWrite(t, conf, body, 0o644)
		time.Sleep(15 * time.Millisecond)
	}
	testutil.Eventually(t, "repaired after the other writer stops", func() bool { return chained(conf) && e.inst.Ready() })
	if b, _ := os.ReadFile(conf); !strings.Contains(string(b), `"round": 29`) {
		t.Errorf("the other writer's last change was lost:\n%s", b)
	}
	if !strings.Contains(e.logs.String(), "another writer keeps removing the plugin") {
		t.Errorf("no warning about the fight; logs:\n%s", e.logs.String())
	}
}

func TestReadinessFollowsTheConfig(t *testing.T) {
	t.Parallel()
	var conf string
	e := start(t, func(e *env) {
		conf = filepath.Join(e.conf, "10-kindnet.conflist")
		mustWrite(t, conf, kindnet, 0o644)
	}, WithRepairThrottle(2*time.Second))
	testutil.Eventually(t, "ready", func() bool { return chained(conf) && e.inst.Ready() })
	if code := readyz(t, e.inst); code != http.StatusOK {
		t.Fatalf("/readyz = %d while chained", code)
	}
	// Removed right after our write: the repair waits for the throttle,
	// and meanwhile the pod must not be reported ready.
	mustWrite(t, conf, kindnet, 0o644)
	testutil.Eventually(t, "not ready while the entry is missing", func() bool { return !e.inst.Ready() })
	if chained(conf) {
		t.Fatal("repaired before the throttle allowed")
	}
	if code := readyz(t, e.inst); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d while the entry is missing", code)
	}
	testutil.Eventually(t, "ready again after the repair", func() bool { return chained(conf) && e.inst.Ready() })
}

func TestRunRewritesKubeconfigWhenTokenRotates(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	kc := filepath.Join(e.conf, kubeconfigName)
	testutil.Eventually(t, "kubeconfig written", func() bool { _, err := os.Stat(kc); return err == nil })
	setToken(t, e.sa, "token-2")
	testutil.Eventually(t, "kubeconfig rewritten", func() bool {
		b, _ := os.ReadFile(kc)
		return strings.Contains(string(b), `"token": "token-2"`)
	})
	if st, _ := os.Stat(kc); st.Mode().Perm() != 0o600 {
		t.Errorf("rewritten kubeconfig mode = %v", st.Mode().Perm())
	}
}

func TestRunLeavesInstallDuringUpgrade(t *testing.T) {
	t.Parallel()
	var conf string
	e := start(t, func(e *env) {
		conf = filepath.Join(e.conf, "10-kindnet.conflist")
		mustWrite(t, conf, kindnet, 0o644)
	}, WithUpgradeCheck(func() bool { return true }))
	testutil.Eventually(t, "chained", func() bool { return chained(conf) })
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	if !chained(conf) {
		t.Error("entry removed during an upgrade")
	}
	if _, err := os.Stat(filepath.Join(e.bin, "meshctl-cni")); err != nil {
		t.Errorf("binary removed during an upgrade: %v", err)
	}
}

func TestRunFailsWithoutServiceAccount(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "bin-src"), "x", 0o755)
	err := New(WithCNIConfDir(filepath.Join(root, "net.d")), WithCNIBinDir(root),
		WithPluginBinary(filepath.Join(root, "bin-src")), WithServiceAccountDir(filepath.Join(root, "nosa"))).Run(context.Background())
	if err == nil {
		t.Fatal("Run without a service account dir succeeded")
	}
}

func readyz(t *testing.T, i *Installer) int {
	t.Helper()
	rec := httptest.NewRecorder()
	i.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code
}

func TestRunServesReadiness(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var conf string
	start(t, func(e *env) {
		conf = filepath.Join(e.conf, "10-kindnet.conflist")
		mustWrite(t, conf, kindnet, 0o644)
	}, WithReadyAddr(addr))
	testutil.Eventually(t, "/readyz 200 over HTTP", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
