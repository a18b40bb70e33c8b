package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/dataplane"
)

// TestBinaryIsAlsoTheCNIPlugin builds meshctl, installs it under the CNI
// plugin's name as install-cni does, and asks it what a runtime asks first.
func TestBinaryIsAlsoTheCNIPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "meshctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	plugin := filepath.Join(dir, dataplane.DefaultPluginType)
	if err := os.Link(bin, plugin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(plugin)
	cmd.Env = append(os.Environ(), "CNI_COMMAND=VERSION")
	cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("VERSION: %v\n%s", err, out)
	}
	var v struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(out, &v); err != nil || !strings.Contains(strings.Join(v.SupportedVersions, ","), "1.1.0") {
		t.Errorf("VERSION answered %s (%v)", out, err)
	}
	out, err = exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "meshctl ") {
		t.Errorf("as meshctl: %q %v", out, err)
	}
}
