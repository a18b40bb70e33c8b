package values

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

func plan(t *testing.T, clusters, networks int) *model.Plan {
	t.Helper()
	p, err := model.NewPlan(model.Request{Clusters: clusters, Networks: networks})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// get walks a dotted path through nested maps.
func get(v map[string]any, dotted string) any {
	var cur any = v
	for _, k := range strings.Split(dotted, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRenderDerivedValues(t *testing.T) {
	t.Parallel()
	out, err := New().Render(plan(t, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 {
		t.Fatalf("%d clusters rendered, want 3", len(out))
	}
	c2 := out[1].Values
	for k, want := range map[string]any{
		"global.meshID":                   "mesh1",
		"global.network":                  "network-2",
		"global.multiCluster.clusterName": "cluster2",
		"global.istioNamespace":           "istio-system", // from the default profile
	} {
		if got := get(c2, k); got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	want := `network-1:
  endpoints:
  - fromRegistry: cluster1
  - fromRegistry: cluster3
  gateways:
  - port: 15443
    registryServiceName: istio-eastwestgateway.istio-system.svc.cluster.local
network-2:
  endpoints:
  - fromRegistry: cluster2
  gateways:
  - port: 15443
    registryServiceName: istio-eastwestgateway.istio-system.svc.cluster.local
`
	if got := toYAML(t, get(c2, "global.meshNetworks")); got != want {
		t.Errorf("meshNetworks:\n%s\nwant:\n%s", got, want)
	}
}

func TestRenderSingleNetworkHasNoGateways(t *testing.T) {
	t.Parallel()
	out, err := New().Render(plan(t, 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	nw := get(out[0].Values, "global.meshNetworks.network-1").(map[string]any)
	if _, ok := nw["gateways"]; ok {
		t.Errorf("single-network mesh has gateways: %v", nw)
	}
	if len(nw["endpoints"].([]any)) != 2 {
		t.Errorf("endpoints: %v", nw["endpoints"])
	}
}

func TestRenderGatewayAddresses(t *testing.T) {
	t.Parallel()
	out, err := New(WithGatewayAddress("network-2", "172.18.0.10"), WithMeshID("m2")).Render(plan(t, 2, 2))
	if err != nil {
		t.Fatal(err)
	}
	gws := get(out[0].Values, "global.meshNetworks.network-2.gateways")
	if got, want := toYAML(t, gws), "- address: 172.18.0.10\n  port: 15443\n"; got != want {
		t.Errorf("gateways %q, want %q", got, want)
	}
	if get(out[0].Values, "global.meshID") != "m2" {
		t.Errorf("meshID: %v", get(out[0].Values, "global.meshID"))
	}
	if _, err := New(WithGatewayAddress("network-9", "1.2.3.4")).Render(plan(t, 2, 2)); err == nil || !strings.Contains(err.Error(), `"network-9"`) {
		t.Errorf("unknown network: %v", err)
	}
}

// TestMergeOrder checks Helm's order and rules: profile, derived values,
// files in turn, then --set; maps merge, lists replace, null deletes.
func TestMergeOrder(t *testing.T) {
	t.Parallel()
	profiles := fstest.MapFS{
		"default.yaml": {Data: []byte("a: {x: 1, w: 1, list: [1, 2]}\ngone: {deep: true}\nkeep: 1\n")},
		"extra.yaml":   {Data: []byte("a: {w: 2, z: 2}\n")},
	}
	f1 := writeFile(t, "a: {x: f1, list: [9]}\nglobal: {network: from-file}\nb: f1\n")
	f2 := writeFile(t, "b: f2\ngone: null\n")
	out, err := New(WithProfiles(profiles), WithProfile("extra"), WithFiles(f1, f2), WithSet("b=set,c.d=1", "a.z=null")).Render(plan(t, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	v := out[0].Values
	want := map[string]any{
		"a":    map[string]any{"x": "f1", "w": float64(2), "list": []any{float64(9)}},
		"b":    "set",
		"c":    map[string]any{"d": int64(1)},
		"keep": float64(1),
	}
	for k, w := range want {
		if !reflect.DeepEqual(v[k], w) {
			t.Errorf("%s = %#v, want %#v", k, v[k], w)
		}
	}
	if _, ok := v["gone"]; ok {
		t.Errorf("a null in a values file should delete the default: %v", v["gone"])
	}
	if get(v, "global.network") != "from-file" || get(v, "global.meshID") != "mesh1" {
		t.Errorf("a file should override derived values and keep the rest: %v", v["global"])
	}
}

func TestRenderDoesNotShareState(t *testing.T) {
	t.Parallel()
	out, err := New().Render(plan(t, 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	out[0].Values["global"].(map[string]any)["istioNamespace"] = "changed"
	if get(out[1].Values, "global.istioNamespace") != "istio-system" {
		t.Error("clusters share maps")
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	notYAML := writeFile(t, "a: [unclosed\n")
	scalar := writeFile(t, "just a string\n")
	tests := []struct {
		name  string
		opts  []Option
		names []string
		want  string
	}{
		{"values file not YAML", []Option{WithFiles(notYAML)}, nil, notYAML},
		{"values file not a map", []Option{WithFiles(scalar)}, nil, scalar},
		{"missing values file", []Option{WithFiles("/nonexistent/v.yaml")}, nil, "/nonexistent/v.yaml"},
		{"bad --set", []Option{WithSet("a.b")}, nil, `--set a.b: key "b" has no value`},
		{"bad --set list index", []Option{WithSet("a[x]=1")}, nil, "--set a[x]=1"},
		{"unknown profile", []Option{WithProfile("sidecarless")}, nil, `unknown profile "sidecarless": want one of ambient, default`},
		{"profile path", []Option{WithProfile("../go")}, nil, `unknown profile "../go"`},
		{"unknown cluster", nil, []string{"cluster9"}, `unknown cluster "cluster9": the environment's clusters are cluster1, cluster2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.opts...).Render(plan(t, 2, 1), tt.names...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestEmbeddedProfilesParse(t *testing.T) {
	t.Parallel()
	r := New()
	names, err := r.Profiles()
	if err != nil || len(names) < 2 {
		t.Fatalf("profiles %v: %v", names, err)
	}
	for _, n := range names {
		out, err := New(WithProfile(n)).Render(plan(t, 1, 1))
		if err != nil {
			t.Errorf("profile %s: %v", n, err)
			continue
		}
		if get(out[0].Values, "global.multiCluster.clusterName") != "cluster1" {
			t.Errorf("profile %s lost derived values", n)
		}
	}
	out, _ := New(WithProfile("ambient")).Render(plan(t, 1, 1))
	if out[0].Values["profile"] != "ambient" || get(out[0].Values, "global.istioNamespace") != "istio-system" {
		t.Errorf("ambient should layer over default: %v", out[0].Values)
	}
}
