package istio

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/install/installer"
)

// TestVersionIsBenchs: meshctl installs Istio's charts from the very module
// version bench/ tests against and hack/e2e/istio-build builds.
func TestVersionIsBenchs(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../../bench/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*istio\.io/istio\s+(\S+)`).FindSubmatch(data)
	if m == nil || string(m[1]) != Version {
		t.Fatalf("bench/go.mod requires istio.io/istio %q, istio.Version is %q", m, Version)
	}
}

func target(name, primary string) Target {
	return Target{Target: installer.Target{Cluster: name}, Primary: primary}
}

func names(phases [][]Target) string {
	var out []string
	for _, p := range phases {
		var ns []string
		for _, t := range p {
			ns = append(ns, t.Cluster)
		}
		out = append(out, strings.Join(ns, ","))
	}
	return strings.Join(out, " | ")
}

func TestOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		targets []Target
		want    string
	}{
		{"primaries only", []Target{target("c1", "c1"), target("c2", "")}, "c1,c2"},
		{"primary-remote", []Target{target("remote", "c1"), target("c1", "c1"), target("c2", "c2")}, "c1,c2 | remote"},
		{"external control plane", []Target{target("config", "external"), target("external", "external"), target("remote", "external")}, "external | config,remote"},
		{"none", nil, ""},
	} {
		if got := names(Order(tc.targets)); got != tc.want {
			t.Errorf("%s: Order = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestImagesApply(t *testing.T) {
	t.Parallel()
	values := func() map[string]any {
		return map[string]any{"global": map[string]any{"network": "n1"}, "pilot": map[string]any{"x": 1}}
	}
	v := values()
	got := Images{}.Apply(v)
	g := got["global"].(map[string]any)
	if g["hub"] != DefaultHub || g["tag"] != Version || g["imagePullPolicy"] != "IfNotPresent" || g["network"] != "n1" {
		t.Errorf("defaults: %v", g)
	}
	if _, changed := v["global"].(map[string]any)["hub"]; changed {
		t.Error("Apply changed its input")
	}
	if ref := PilotImage(got); ref != "meshctl/pilot:"+Version {
		t.Errorf("PilotImage = %s", ref)
	}

	// The user's values win over the defaults; the flags over both.
	user := values()
	user["global"].(map[string]any)["hub"] = "gcr.io/istio-testing"
	g = Images{}.Apply(user)["global"].(map[string]any)
	if g["hub"] != "gcr.io/istio-testing" || g["tag"] != Version || g["imagePullPolicy"] != nil {
		t.Errorf("user hub: %v", g)
	}
	g = Images{Hub: "docker.io/istio", Tag: "1.29.0"}.Apply(user)["global"].(map[string]any)
	if g["hub"] != "docker.io/istio" || g["tag"] != "1.29.0" {
		t.Errorf("flags: %v", g)
	}
}

func TestPilotImage(t *testing.T) {
	t.Parallel()
	g := map[string]any{"hub": "h", "tag": "t"}
	for _, tc := range []struct {
		v    map[string]any
		want string
	}{
		{map[string]any{"global": g}, "h/pilot:t"},
		{map[string]any{"global": g, "hub": "h2", "tag": "t2", "image": "istiod"}, "h2/istiod:t2"},
		{map[string]any{"global": map[string]any{"hub": "h", "tag": "t", "variant": "distroless"}}, "h/pilot:t-distroless"},
		{map[string]any{"global": g, "image": "reg.io/x/pilot:1"}, "reg.io/x/pilot:1"},
	} {
		if got := PilotImage(tc.v); got != tc.want {
			t.Errorf("PilotImage(%v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

// TestSaveFromDocker: the images the host's Docker has go into one
// archive, by one `docker save`; those it lacks are left out, and with none
// of them nothing is saved.
func TestSaveFromDocker(t *testing.T) {
	t.Parallel()
	var calls []string
	docker := func(_ context.Context, args ...string) error {
		calls = append(calls, strings.Join(args, " "))
		if args[0] == "image" && strings.HasPrefix(args[len(args)-1], "absent/") {
			return os.ErrNotExist
		}
		return nil
	}
	dir := t.TempDir()
	if path, found, err := SaveFromDocker(context.Background(), docker, dir, "absent/pilot:1"); path != "" || found != nil || err != nil {
		t.Errorf("absent image: %q %v %v", path, found, err)
	}
	if n := len(calls); n != 1 {
		t.Errorf("absent image: %d docker calls, want the inspect alone: %q", n, calls)
	}
	calls = nil
	path, found, err := SaveFromDocker(context.Background(), docker, dir, "meshctl/pilot:v1", "absent/pilot:1", "meshctl/install-cni:v1")
	if want := []string{"meshctl/pilot:v1", "meshctl/install-cni:v1"}; !slices.Equal(found, want) || err != nil ||
		path != filepath.Join(dir, "meshctl_pilot_v1+meshctl_install-cni_v1.tar") {
		t.Errorf("present images: %s %v %v", path, found, err)
	}
	var saves []string
	for _, c := range calls {
		if strings.HasPrefix(c, "save ") {
			saves = append(saves, c)
		}
	}
	if want := []string{"save -o " + path + " meshctl/pilot:v1 meshctl/install-cni:v1"}; !slices.Equal(saves, want) {
		t.Errorf("docker saves %q, want %q", saves, want)
	}
	failing := func(_ context.Context, args ...string) error {
		if args[0] == "save" {
			return errors.New("no space left on device")
		}
		return nil
	}
	if _, _, err := SaveFromDocker(context.Background(), failing, dir, "meshctl/pilot:v1", "meshctl/install-cni:v1"); err == nil ||
		!strings.Contains(err.Error(), "saving meshctl/pilot:v1, meshctl/install-cni:v1 from docker: no space left") {
		t.Errorf("failed save: %v", err)
	}
}

func TestCheckChartsAndValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	err := New(WithCharts(dir)).Validate(target("c1", "c1"))
	if err == nil || !strings.Contains(err.Error(), "no chart base") || !strings.Contains(err.Error(), dir) {
		t.Errorf("empty charts directory: %v", err)
	}
	if err := New().Validate(); err == nil || !strings.Contains(err.Error(), "--istio-charts") {
		t.Errorf("no charts directory: %v", err)
	}
}

// chartsDir is Istio's charts from the module download; tests needing them
// skip without Go or a module cache/proxy to download from.
func chartsDir(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to download " + Module)
	}
	dir, err := ChartsDir(context.Background(), Version)
	if err != nil {
		t.Skipf("Istio's charts unavailable: %v", err)
	}
	return dir
}

func TestChartsDir(t *testing.T) {
	t.Parallel()
	dir := chartsDir(t)
	if err := CheckCharts(dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dir, Module+"@"+Version) {
		t.Errorf("charts from %s, not the module download of %s", dir, Version)
	}
}

// TestRenderRealCharts renders Istio's own charts, as Install installs
// them, with the values `values render` gives a cluster: istiod runs the
// offline image and is the cluster's (CLUSTER_ID), with no API server.
func TestRenderRealCharts(t *testing.T) {
	t.Parallel()
	dir := chartsDir(t)
	v := Images{}.Apply(map[string]any{"global": map[string]any{
		"istioNamespace": "istio-system", "meshID": "mesh1", "network": "network1",
		"multiCluster": map[string]any{"enabled": true, "clusterName": "cluster7"},
	}})
	out, err := New(WithCharts(dir)).helm().Render(v)
	if err != nil {
		t.Fatal(err)
	}
	istiod := out["istiod"]
	for _, want := range []string{
		`image: "meshctl/pilot:` + Version + `"`,
		"imagePullPolicy: IfNotPresent",
	} {
		if !strings.Contains(istiod, want) {
			t.Errorf("istiod's manifest lacks %q", want)
		}
	}
	if !regexp.MustCompile(`name: CLUSTER_ID\s+value: "cluster7"`).MatchString(istiod) {
		t.Error("istiod's CLUSTER_ID is not cluster7")
	}
	if !strings.Contains(out["base"], "name: istio-reader-service-account") {
		t.Error("base's manifest has no istio-reader-service-account")
	}
}
