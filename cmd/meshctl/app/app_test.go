package app

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

const testdata = "../../../testdata"

// run runs meshctl in-process and returns its exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, Streams{Out: &out, Err: &errb}, nil)
	return code, out.String(), errb.String()
}

func TestDryRunGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		golden string
		args   []string
	}{
		{"up-clusters-3.txt", []string{"up", "--clusters", "3", "--dry-run"}},
		{"up-clusters-3.json", []string{"up", "--clusters", "3", "--dry-run", "-o", "json"}},
		{"up-multi-network-dual.yaml", []string{"up", "--clusters", "4", "--networks", "2", "--workers", "1", "--ip-family", "dual", "--image", "meshctl/node:v1.34.4", "--dry-run", "-o", "yaml"}},
		{"up-ipv6-env.txt", []string{"up", "--clusters", "2", "--ip-family", "ipv6", "--env", "ci", "--registry=false", "--image", "meshctl/node:v1.34.4", "--dry-run"}},
		{"up-topology-multicluster-3.txt", []string{"up", "--topology", filepath.Join(testdata, "topology/valid-istio-multicluster-3.json"), "--dry-run"}},
		{"up-topology-external-control-plane.json", []string{"up", "--topology", filepath.Join(testdata, "topology/valid-external-control-plane.json"), "--dry-run", "-o", "json"}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			checkGolden(t, tt.golden, out)
		})
	}
}

// checkGolden compares out with testdata/golden/NAME, rewriting it first
// under -update.
func checkGolden(t *testing.T, name, out string) {
	t.Helper()
	path := filepath.Join(testdata, "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/meshctl/app -update)", err)
	}
	if out != string(want) {
		t.Errorf("output differs from %s (rerun with -update if intended):\n%s", path, out)
	}
}

// dryRunJSON runs `up --dry-run -o json` and decodes the plan.
func dryRunJSON(t *testing.T, args ...string) dryRun {
	t.Helper()
	code, out, errOut := run(t, append([]string{"up", "--dry-run", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var d dryRun
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	return d
}

func TestConfigEnvAndFlagsPrecedence(t *testing.T) {
	cfg := filepath.Join(testdata, "config/valid-config.yaml")
	d := dryRunJSON(t, "--config", cfg)
	if d.Env != "ci" || len(d.Clusters) != 4 || d.Registry.Enabled || d.Clusters[1].Network != "network-2" || d.Clusters[0].Workers != 1 || d.Clusters[0].IPFamily != "dual" {
		t.Errorf("config file not applied: %+v", d)
	}
	t.Setenv("MESHCTL_CLUSTERS", "3")
	t.Setenv("MESHCTL_IP_FAMILY", "ipv6")
	d = dryRunJSON(t, "--config", cfg)
	if len(d.Clusters) != 3 || d.Clusters[0].IPFamily != "ipv6" {
		t.Errorf("environment should beat the config file: %d clusters, %s", len(d.Clusters), d.Clusters[0].IPFamily)
	}
	d = dryRunJSON(t, "--config", cfg, "--clusters", "2", "--ip-family", "ipv4")
	if len(d.Clusters) != 2 || d.Clusters[0].IPFamily != "ipv4" || d.Env != "ci" {
		t.Errorf("flags should beat the environment: %d clusters, %s, env %s", len(d.Clusters), d.Clusters[0].IPFamily, d.Env)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"up", "--config", filepath.Join(testdata, "config/invalid-config-unknown-key.yaml"), "--dry-run"}, "unknown key(s) cluster-count"},
		{[]string{"up", "--config", filepath.Join(testdata, "config/invalid-config-not-yaml.yaml"), "--dry-run"}, "invalid-config-not-yaml.yaml"},
		{[]string{"up", "--config", "missing.yaml", "--dry-run"}, "reading config file missing.yaml"},
		{[]string{"up", "--networks", "2", "--dry-run"}, "--networks 2 exceeds --clusters 1"},
		{[]string{"up", "--clusters", "0", "--dry-run"}, `invalid argument "0" for "--clusters" flag: must be at least 1, got 0`},
		{[]string{"up", "--clusters", "2", "--networks", "0", "--dry-run"}, `invalid argument "0" for "--networks" flag: must be at least 1, got 0`},
		{[]string{"up", "--clusters", "-1", "--dry-run"}, `invalid argument "-1" for "--clusters" flag: must be at least 1`},
		{[]string{"up", "--ip-family", "ipv7", "--dry-run"}, `cluster "cluster1": unknown ipFamily "ipv7"`},
		{[]string{"up", "--topology", filepath.Join(testdata, "topology/invalid-overlapping-pod-subnets.json"), "--dry-run"}, `cluster "one": podSubnet 10.10.0.0/16 overlaps`},
		{[]string{"up", "--dry-run", "-o", "xml"}, `unknown output format "xml"`},
		{[]string{"up", "extra-arg"}, `unknown command "extra-arg"`},
		{[]string{"kubeconfig"}, "accepts 1 arg(s)"},
		{[]string{"up", "--workers", "many"}, `invalid argument "many"`},
		{[]string{"up", "--metallb-upstream-images", "--metallb-speaker-image", "x", "--dry-run"}, "--metallb-upstream-images and --metallb-controller-image/--metallb-speaker-image: give one or the other"},
		{[]string{"connect", "--metallb-upstream-images", "--metallb-controller-image", "x"}, "give one or the other"},
		{[]string{"connect", "--gateway-timeout", "soon"}, `invalid argument "soon"`},
		{[]string{"up", "--istio-ambient", "--dry-run"}, "--istio-ambient installs Istio in ambient mode: it needs --istio"},
		{[]string{"install", "--istio-ambient"}, "--istio-ambient installs Istio in ambient mode: it needs --istio"},
		{[]string{"up", "--istio", "--istio-ambient", "--profile", "sidecarless", "--dry-run"}, "--profile sidecarless cannot go with it"},
		{[]string{"up", "--istio", "--istio-ambient", "--install=false", "--dry-run"}, "--istio-ambient runs meshctl's proxy as Istio's ztunnel: it cannot go with --install=false"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, tt.args...)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if out != "" {
				t.Errorf("bad input printed a result: %q", out)
			}
			if !strings.Contains(errOut, tt.want) || !strings.HasPrefix(errOut, "ERROR: ") {
				t.Errorf("stderr %q lacks %q", errOut, tt.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, "version", "-o", "json")
	var v map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v["version"] == "" || v["go"] == "" {
		t.Errorf("version: %d %q", code, out)
	}
	code, out, _ = run(t, "completion", "bash")
	if code != 0 || !strings.Contains(out, "__start_meshctl") {
		t.Errorf("bash completion: %d", code)
	}
}

// TestIntegrationNoDockerEngine runs the real provider against a Docker
// socket that does not exist: one clear error, nothing created.
func TestIntegrationNoDockerEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("needs the docker CLI (the engine may be absent): not installed")
	}
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	// --install=false: the install is validated before any cluster is
	// created, and a cgo-built test binary (the default dataplane binary
	// here) would be refused for that before Docker is ever asked.
	code, out, errOut := run(t, "up", "--clusters", "1", "--install=false", "--artifacts", t.TempDir())
	if code != 1 || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	if !strings.Contains(errOut, "ERROR: ") || !strings.Contains(errOut, "cannot reach the Docker engine") || !strings.Contains(errOut, "systemctl start docker") {
		t.Errorf("stderr: %s", errOut)
	}
}

// TestIstioAmbientFlags: --istio-ambient goes with --istio and the default
// or ambient values profile, and nothing else.
func TestIstioAmbientFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"up", "--istio", "--istio-ambient", "--dry-run"},
		{"up", "--istio", "--istio-ambient", "--profile", "ambient", "--dry-run"},
	} {
		if code, _, errOut := run(t, args...); code != 0 {
			t.Errorf("%q: exit %d: %s", args, code, errOut)
		}
	}
	o := istioFlags{Istio: true, Ambient: true}
	if err := o.validate(&valuesFlags{Profile: "default"}); err != nil {
		t.Errorf("default profile: %v", err)
	}
	if n := len(o.meshOptions()); n != 3 {
		t.Errorf("ambient mesh options: %d, want WithIstio, WithIstioAmbient and the ambient profile", n)
	}
}
