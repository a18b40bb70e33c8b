package app

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// noDocker points the real provider at a Docker socket that does not
// exist and the artifacts at a temporary directory: should a bad setting
// slip through as a zero value (--dry-run=false, say), the command fails
// without touching the machine's Docker engine or artifacts.
func noDocker(t *testing.T) {
	t.Helper()
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	t.Setenv("MESHCTL_ARTIFACTS", t.TempDir())
}

// wantRefused runs meshctl and wants exit 1, no result, and every one of
// want in the error.
func wantRefused(t *testing.T, args []string, want ...string) {
	t.Helper()
	code, out, errOut := run(t, args...)
	if code != 1 || out != "" {
		t.Errorf("exit %d, stdout %q; want exit 1 and no output", code, out)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) || !strings.HasPrefix(errOut, "ERROR: ") {
			t.Errorf("stderr %q lacks %q", errOut, w)
		}
	}
}

// TestBadEnvironmentVariables: a MESHCTL_* value goes through its flag's
// parser and a bad one is an error naming the variable, never a zero.
func TestBadEnvironmentVariables(t *testing.T) {
	long := strings.Repeat("x", maxImageRef+1)
	tests := []struct {
		env, value string
		args       []string
		want       string
	}{
		// Was: dry-run false, and a real `up`.
		{"MESHCTL_DRY_RUN", "yes", []string{"up", "--install=false"}, `MESHCTL_DRY_RUN="yes": want true or false`},
		{"MESHCTL_DRY_RUN", "maybe", []string{"up", "--install=false"}, `MESHCTL_DRY_RUN="maybe": want true or false`},
		// Was: "--clusters must be at least 1, got 0".
		{"MESHCTL_CLUSTERS", "abc", []string{"up", "--dry-run"}, `MESHCTL_CLUSTERS="abc": want an integer`},
		{"MESHCTL_CLUSTERS", "0", []string{"up", "--dry-run"}, `MESHCTL_CLUSTERS="0": must be at least 1`},
		{"MESHCTL_CLUSTERS", "65", []string{"up", "--dry-run"}, `MESHCTL_CLUSTERS="65": must be at most 64`},
		// Was: a wait of 0 s.
		{"MESHCTL_WAIT", "forever", []string{"up", "--dry-run"}, `MESHCTL_WAIT="forever": want a duration`},
		{"MESHCTL_WORKERS", "10000000", []string{"up", "--dry-run"}, `MESHCTL_WORKERS="10000000": must be at most 32`},
		{"MESHCTL_REGISTRY_PORT", "70000", []string{"up", "--dry-run"}, `MESHCTL_REGISTRY_PORT="70000": must be at most 65535`},
		{"MESHCTL_IMAGE", long, []string{"up", "--dry-run"}, "MESHCTL_IMAGE=\"xxx"},
		{"MESHCTL_IMAGE", long, []string{"up", "--dry-run"}, "513 bytes long: an image reference is at most 512"},
		{"MESHCTL_OUTPUT", "xml", []string{"up", "--dry-run"}, `MESHCTL_OUTPUT="xml": unknown output format "xml"`},
		{"MESHCTL_VERBOSITY", "loud", []string{"version"}, `MESHCTL_VERBOSITY="loud": want an integer`},
		{"MESHCTL_GATEWAY_ADDRESS", "10.0.0.1", []string{"values", "render"}, `MESHCTL_GATEWAY_ADDRESS="10.0.0.1": want NETWORK=ADDRESS`},
		{"MESHCTL_INSTALL_TIMEOUT", "soon", []string{"uninstall"}, `MESHCTL_INSTALL_TIMEOUT="soon"`},
		{"MESHCTL_CONFIG", "/dev/zero", []string{"up", "--dry-run"}, "reading config file /dev/zero: read /dev/zero: not a regular file (a character device)"},
	}
	for _, tt := range tests {
		t.Run(tt.env+"="+tt.value[:min(len(tt.value), 16)], func(t *testing.T) {
			noDocker(t)
			t.Setenv(tt.env, tt.value)
			wantRefused(t, tt.args, tt.want)
		})
	}
}

// TestBadConfigFileValues: a config file's value goes through its flag's
// parser and a bad one is an error naming the file and the key.
func TestBadConfigFileValues(t *testing.T) {
	tests := []struct {
		yaml string
		args []string
		want string
	}{
		// Was: registry false (YAML 1.2 has no `yes` boolean).
		{"registry: yes", []string{"up", "--dry-run"}, `key registry: "yes": want true or false`},
		{"registry: maybe", []string{"up", "--dry-run"}, `key registry: "maybe": want true or false`},
		// Was: 2 clusters.
		{"clusters: 2.7", []string{"up", "--dry-run"}, `key clusters: "2.7": want an integer`},
		// Was: out of memory.
		{"workers: 1e9", []string{"up", "--dry-run"}, `key workers: "1e+09": want an integer`},
		{"workers: 1000000000", []string{"up", "--dry-run"}, `key workers: "1000000000": must be at most 32`},
		{"networks: 0", []string{"values", "render"}, `key networks: "0": must be at least 1`},
		{"wait: forever", []string{"up", "--dry-run"}, `key wait: "forever": want a duration`},
		{"wait: 300", []string{"up", "--dry-run"}, `key wait: "300": want a duration`},
		{"image: " + strings.Repeat("x", 600), []string{"up", "--dry-run"}, "key image: \"xxx"},
		{"image: " + strings.Repeat("x", 600), []string{"up", "--dry-run"}, "600 bytes long: an image reference is at most 512"},
		{"clusters: [1, 2]", []string{"up", "--dry-run"}, "key clusters: a list, want a single value"},
		{"dry-run:", []string{"up", "--install=false"}, "key dry-run: no value"},
		{"output: xml", []string{"status"}, `key output: "xml": unknown output format "xml": want text, json or yaml`},
		{"gateway-address: [network-1=10.0.0.1, bad]", []string{"values", "render"}, `key gateway-address: item 2: "bad": want NETWORK=ADDRESS`},
		{"gateway-address: network-1=not_a_host", []string{"values", "render"}, `key gateway-address: "network-1=not_a_host": address "not_a_host": want an IP address or a DNS name`},
		{"cluster-count: 3", []string{"up", "--dry-run"}, "unknown key(s) cluster-count"},
	}
	for _, tt := range tests {
		t.Run(tt.yaml[:min(len(tt.yaml), 40)], func(t *testing.T) {
			noDocker(t)
			cfg := filepath.Join(t.TempDir(), "meshctl.yaml")
			if err := os.WriteFile(cfg, []byte(tt.yaml+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			wantRefused(t, append(tt.args, "--config", cfg), "config file "+cfg+": ", tt.want)
		})
	}
}

// TestBadFlagValues: the command line's values are bounded by the same
// parsers.
func TestBadFlagValues(t *testing.T) {
	noDocker(t)
	tests := []struct {
		args []string
		want string
	}{
		// Was: 3.9 GB and a hang.
		{[]string{"up", "--workers", "10000000", "--dry-run"}, `invalid argument "10000000" for "--workers" flag: must be at most 32`},
		{[]string{"up", "--workers", "-1", "--dry-run"}, `invalid argument "-1" for "--workers" flag: must be at least 0`},
		{[]string{"up", "--clusters", "65", "--dry-run"}, `invalid argument "65" for "--clusters" flag: must be at most 64`},
		{[]string{"up", "--clusters", "8", "--workers", "32", "--dry-run"}, "the plan has 264 nodes: more than the 256 meshctl runs on one machine"},
		{[]string{"up", "--dry-run=maybe"}, `invalid argument "maybe" for "--dry-run" flag: want true or false`},
		{[]string{"up", "--image", strings.Repeat("x", 513), "--dry-run"}, `for "--image" flag: 513 bytes long: an image reference is at most 512`},
		{[]string{"up", "--registry-port", "0", "--dry-run"}, `for "--registry-port" flag: must be at least 1`},
		{[]string{"up", "--wait", "forever", "--dry-run"}, `invalid argument "forever" for "--wait" flag: want a duration`},
		{[]string{"values", "render", "--gateway-address", "network-1=bad_host!"}, `address "bad_host!": want an IP address or a DNS name`},
		{[]string{"values", "render", "-o", "text"}, `unknown output format "text": want yaml or json`},
		{[]string{"check", "connectivity", "--image", strings.Repeat("x", 513)}, `for "--image" flag: 513 bytes long`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " ")[:min(len(strings.Join(tt.args, " ")), 60)], func(t *testing.T) {
			wantRefused(t, tt.args, tt.want)
		})
	}
}

// TestSettingsFromEnvironmentAndConfigFile: good values from both sources
// are parsed as the command line's are, with the same precedence.
func TestSettingsFromEnvironmentAndConfigFile(t *testing.T) {
	noDocker(t)
	cfg := filepath.Join(t.TempDir(), "meshctl.yaml")
	if err := os.WriteFile(cfg, []byte("clusters: 3\nworkers: 2\nregistry: true\nregistry-port: 5002\nwait: 2m\nname-prefix: p-\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MESHCTL_WORKERS", "1")
	t.Setenv("MESHCTL_REGISTRY", "f")
	d := dryRunJSON(t, "--config", cfg, "--clusters", "2")
	if len(d.Clusters) != 2 || d.Clusters[0].Workers != 1 || d.Registry.Enabled || d.Clusters[0].KindName != "p-cluster1" {
		t.Errorf("want 2 clusters (flag), 1 worker (environment), no registry (environment), prefix p- (file): %+v", d)
	}
	t.Setenv("MESHCTL_REGISTRY", "")
	if d := dryRunJSON(t, "--config", cfg); !d.Registry.Enabled || d.Registry.Port != 5002 || len(d.Clusters) != 3 {
		t.Errorf("an empty variable is unset: want the file's registry on 5002 and 3 clusters: %+v", d)
	}
}

// TestInputFilesBounded: every file meshctl reads for the user (config,
// topology, values) must be a regular file under 4 MiB: /dev/zero once ran
// meshctl out of memory and a FIFO hung it.
func TestInputFilesBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", 4<<20)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, file := range []struct{ path, want string }{
		{"/dev/zero", "read /dev/zero: not a regular file (a character device)"},
		{fifo, "read " + fifo + ": not a regular file (a named pipe)"},
		{dir, "read " + dir + ": not a regular file (a directory)"},
		{big, "read " + big + ": file too large: larger than the limit of 4 MiB"},
	} {
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"up", "--dry-run", "--config", file.path}, "reading config file " + file.path + ": " + file.want},
			{[]string{"up", "--dry-run", "--topology", file.path}, "reading topology: " + file.want},
			{[]string{"values", "render", "-f", file.path}, "reading values file: " + file.want},
		} {
			t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
				wantRefused(t, tt.args, tt.want)
			})
		}
	}
}
