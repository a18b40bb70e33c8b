package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshctl/meshctl/internal/syncbuf"
)

// TestDataplaneInstallCNI runs the hidden entrypoint as the DaemonSet does,
// flags and environment variables together, against host-like temp dirs:
// the plugin is chained and copied, then removed when the Pod stops.
func TestDataplaneInstallCNI(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	conf, bin, sa := filepath.Join(root, "net.d"), filepath.Join(root, "bin"), filepath.Join(root, "sa")
	for _, d := range []string{conf, bin, sa} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{
		filepath.Join(sa, "token"):                 "token",
		filepath.Join(sa, "ca.crt"):                "ca",
		filepath.Join(conf, "10-kindnet.conflist"): `{"cniVersion":"0.3.1","name":"kindnet","plugins":[{"type":"ptp"}]}`,
		filepath.Join(root, "meshctl"):             "#!binary",
	} {
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := &syncbuf.Buffer{}
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"dataplane", "install-cni",
			"--cni-conf-dir", conf, "--cni-bin-dir", bin, "--plugin-binary", filepath.Join(root, "meshctl"),
			"--exclude-namespaces", "kube-system,istio-system", "--ready-addr", "127.0.0.1:0",
			"--host-cni-conf-dir", "/etc/cni/net.d", "--service-account-dir", sa}, Streams{Out: &bytes.Buffer{}, Err: errs}, nil)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(filepath.Join(conf, "10-kindnet.conflist"))
		if strings.Contains(string(data), `"meshctl-cni"`) && strings.Contains(string(data), `"istio-system"`) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("plugin never chained: %s\nlogs: %s", data, errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := os.ReadFile(filepath.Join(bin, "meshctl-cni")); err != nil || string(got) != "#!binary" {
		t.Errorf("plugin binary: %q, %v", got, err)
	}
	cancel()
	if code := <-done; code != 130 && code != 0 {
		t.Errorf("exit %d: %s", code, errs)
	}
	data, _ := os.ReadFile(filepath.Join(conf, "10-kindnet.conflist"))
	if strings.Contains(string(data), "meshctl-cni") {
		t.Errorf("entry left after exit: %s", data)
	}
	if _, err := os.Stat(filepath.Join(bin, "meshctl-cni")); !os.IsNotExist(err) {
		t.Errorf("plugin binary left after exit: %v", err)
	}
}

func TestDataplaneBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"dataplane", "signer", "--cacerts-dir", "/nonexistent"}, "reading cacerts"},
		{[]string{"dataplane", "node-agent", "--node-name", ""}, "node name not set"},
		{[]string{"dataplane", "install-cni", "--daemonset", "x", "--namespace", ""}, "POD_NAMESPACE"},
	}
	for _, tt := range tests {
		code, _, errOut := run(t, tt.args...)
		if code != 1 || !strings.Contains(errOut, tt.want) {
			t.Errorf("meshctl %s: exit %d, %q, want %q", strings.Join(tt.args, " "), code, errOut, tt.want)
		}
	}
}
