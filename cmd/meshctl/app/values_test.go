package app

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestValuesGolden(t *testing.T) {
	t.Parallel()
	topo := func(name string) string { return filepath.Join(testdata, "topology", name) }
	tests := []struct {
		golden string
		args   []string
	}{
		{"values-single-network.yaml", []string{"values", "render", "--clusters", "2"}},
		{"values-multi-network.yaml", []string{"values", "render", "--clusters", "3", "--networks", "2"}},
		{"values-multi-network.json", []string{"values", "render", "--clusters", "3", "--networks", "2", "-o", "json"}},
		{"values-primary-remote.yaml", []string{"values", "render", "--topology", topo("valid-istio-multicluster-3.json")}},
		{"values-ipv6.yaml", []string{"values", "render", "--topology", topo("valid-ipv6.json"), "--mesh-id", "mesh-v6", "--gateway-address", "network-2=fc00:f853:ccd:e793::10"}},
		{"values-shape-single.yaml", []string{"values", "render", "--topology", topo("valid-istio-shape-single.json")}},
		{"values-shape-multicluster.yaml", []string{"values", "render", "--topology", topo("valid-istio-shape-multicluster.json")}},
		{"values-shape-multicluster-known.yaml", []string{"values", "render", "--topology", topo("valid-istio-shape-multicluster.json"), "--istiod-address", "east=172.18.200.1"}},
		{"values-shape-multicluster-large.yaml", []string{"values", "render", "--topology", topo("valid-istio-shape-multicluster-large.json")}},
		{"values-shape-external-istiod.yaml", []string{"values", "render", "--topology", topo("valid-istio-shape-external-istiod.json"), "--istiod-address", "cp=172.18.200.9"}},
		{"values-shape-external-istiod-multicluster.yaml", []string{"values", "render", "--topology", topo("valid-istio-shape-external-istiod-multicluster.json"), "--istiod-address", "cp=istiod.cp.example"}},
		{"values-shape-ambient-multicluster.yaml", []string{"values", "render", "--topology", topo("valid-istio-shape-ambient-multicluster.json"), "--profile", "ambient"}},
		{"values-ambient-overrides.yaml", []string{"values", "render", "--clusters", "2", "--cluster", "cluster2", "--profile", "ambient",
			"-f", filepath.Join(testdata, "values/valid-overrides.yaml"), "--set", "pilot.autoscaleEnabled=true,global.proxy.tags={a,b}"}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			checkGolden(t, tt.golden, out)
			checkValuesParse(t, tt.golden, out)
		})
	}
}

// checkValuesParse proves the output is what a machine can read: every YAML
// document a map naming its cluster, or JSON keyed by cluster.
func checkValuesParse(t *testing.T, name, out string) {
	t.Helper()
	if strings.HasSuffix(name, ".json") {
		var m map[string]map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil || len(m) == 0 {
			t.Errorf("not JSON keyed by cluster: %v", err)
		}
		return
	}
	for _, doc := range strings.Split(out, "\n---\n") {
		var m map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			t.Errorf("document is not YAML: %v\n%s", err, doc)
			continue
		}
		first, _, _ := strings.Cut(doc, "\n")
		g, _ := m["global"].(map[string]any)
		mc, _ := g["multiCluster"].(map[string]any)
		// An external control plane's istiod takes its config cluster's
		// ID, as Istio's test framework installs it.
		if first != "# cluster: "+mc["clusterName"].(string) && g["externalIstiod"] != true {
			t.Errorf("document headed %q is for cluster %v", first, mc["clusterName"])
		}
	}
}

func TestValuesBadInput(t *testing.T) {
	t.Parallel()
	notYAML := filepath.Join(testdata, "values/invalid-not-yaml.yaml")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"values", "render", "-f", notYAML}, "values file " + notYAML + ": not a YAML map"},
		{[]string{"values", "render", "-f", "missing.yaml"}, "missing.yaml"},
		{[]string{"values", "render", "--set", "global.meshID"}, `--set global.meshID: key "meshID" has no value`},
		{[]string{"values", "render", "--clusters", "2", "--cluster", "cluster7"}, `unknown cluster "cluster7": the environment's clusters are cluster1, cluster2`},
		{[]string{"values", "render", "--profile", "nope"}, `unknown profile "nope": want one of ambient, default`},
		{[]string{"values", "render", "-o", "text"}, `unknown output format "text": want yaml or json`},
		{[]string{"values", "render", "--networks", "2"}, "--networks 2 exceeds --clusters 1"},
		{[]string{"values", "render", "--gateway-address", "10.0.0.1"}, `invalid argument "10.0.0.1" for "--gateway-address" flag: want NETWORK=ADDRESS`},
		{[]string{"values", "render", "--clusters", "2", "--networks", "2", "--gateway-address", "network-3=10.0.0.1"}, `gateway address for unknown network "network-3": the networks are network-1, network-2`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, tt.args...)
			if code != 1 || out != "" {
				t.Errorf("exit %d, stdout %q", code, out)
			}
			if !strings.Contains(errOut, tt.want) || !strings.HasPrefix(errOut, "ERROR: ") {
				t.Errorf("stderr %q lacks %q", errOut, tt.want)
			}
		})
	}
}

func TestValuesFromConfigFile(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(testdata, "config/valid-config-values.yaml")
	code, out, errOut := run(t, "values", "render", "--config", cfg, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["cluster2"]["global"].(map[string]any)["meshID"] != "from-config" || m["cluster2"]["pilot"] == nil {
		t.Errorf("config file's set not applied: %s", out)
	}
	// The command line wins, and keeps a={x,y} whole.
	code, out, errOut = run(t, "values", "render", "--config", cfg, "--set", "tags={x,y}", "--cluster", "cluster1", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if g := m["cluster1"]["global"].(map[string]any); g["meshID"] != "mesh1" || len(m["cluster1"]["tags"].([]any)) != 2 {
		t.Errorf("--set should replace the config file's: %s", out)
	}
}
