package istio

import (
	"regexp"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/install/installer"
	"github.com/meshctl/meshctl/pkg/install/values"
)

// ambientValues are the values `values render --profile ambient` gives the
// first cluster of a two-cluster, one-network plan, with the images.
func ambientValues(t *testing.T) map[string]any {
	t.Helper()
	plan, err := model.NewPlan(model.Request{Clusters: 2})
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := values.New(values.WithProfile("ambient")).Render(plan)
	if err != nil {
		t.Fatal(err)
	}
	return Images{}.Apply(rendered[0].Values)
}

var testZtunnel = &Ztunnel{Image: "meshctl/dataplane:dev", ImageID: "sha256:0123", MeshCIDRs: []string{"10.10.0.0/16", "10.20.0.0/16"}}

// envValue finds a container env var's literal value in a manifest.
func envValue(manifest, name string) string {
	m := regexp.MustCompile(`- name: ` + name + `\s+value: "?([^"\n]*)"?`).FindStringSubmatch(manifest)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestRenderAmbientCharts renders Istio's own charts as the ambient install
// installs them: istiod with ambient on and the ztunnel account trusted,
// istio-cni enrolling pods, and ztunnel's chart running meshctl's proxy
// under ztunnel's names, with the offline images (no distroless variant,
// which the ambient profile asks for and the offline build lacks).
func TestRenderAmbientCharts(t *testing.T) {
	t.Parallel()
	dir := chartsDir(t)
	v := ambientValues(t)
	in := New(WithCharts(dir), WithAmbient(true))
	tgt := in.plain([]Target{{Target: targetOf("cluster1", v), Ztunnel: testZtunnel}})[0]
	out := map[string]string{}
	for _, r := range AmbientReleases {
		m, err := in.helmOf([]Release{r}).Render(tgt.ValuesOf(r.Chart))
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		for _, s := range m {
			out[r.Name] = s
		}
	}
	istiod, cni, zt := out["istiod"], out["istio-cni"], out["ztunnel"]
	for name, want := range map[string]string{"PILOT_ENABLE_AMBIENT": "true", "CA_TRUSTED_NODE_ACCOUNTS": "istio-system/ztunnel", "CLUSTER_ID": "cluster1"} {
		if got := envValue(istiod, name); got != want {
			t.Errorf("istiod %s = %q, want %q", name, got, want)
		}
	}
	for release, want := range map[string]string{"istiod": `image: "meshctl/pilot:` + Version + `"`, "istio-cni": `image: "meshctl/install-cni:` + Version + `"`, "ztunnel": `image: "meshctl/dataplane:dev"`} {
		if !strings.Contains(out[release], want) {
			t.Errorf("%s's manifest lacks %s", release, want)
		}
	}
	if !regexp.MustCompile(`AMBIENT_ENABLED: "true"`).MatchString(cni) || !strings.Contains(cni, "name: istio-cni-node") {
		t.Error("istio-cni is not the ambient istio-cni-node DaemonSet")
	}
	// meshctl's proxy serves no DNS on 15053: istio-cni must not send
	// the pods' DNS there.
	if !strings.Contains(cni, `AMBIENT_DNS_CAPTURE: "false"`) {
		t.Error(`istio-cni's config lacks AMBIENT_DNS_CAPTURE: "false"`)
	}
	for _, want := range []string{
		"kind: DaemonSet\nmetadata:\n  name: ztunnel",
		"serviceAccountName: ztunnel",
		"app: ztunnel",
		"args:\n        - proxy\n        - ztunnel",
		"imagePullPolicy: IfNotPresent",
		"path: /var/run/ztunnel",
		ZtunnelImageIDAnnotation + `: sha256:0123`,
	} {
		if !strings.Contains(zt, want) {
			t.Errorf("ztunnel's manifest lacks %q", want)
		}
	}
	for name, want := range map[string]string{
		"CA_ADDRESS":            "istiod.istio-system.svc:15012",
		"XDS_ADDRESS":           "istiod.istio-system.svc:15012",
		"ISTIO_META_CLUSTER_ID": "cluster1",
		"MESHCTL_MESH_CIDRS":    "10.10.0.0/16,10.20.0.0/16",
	} {
		if got := envValue(zt, name); got != want {
			t.Errorf("ztunnel %s = %q, want %q", name, got, want)
		}
	}
	if strings.Contains(zt, "PILOT_ENABLE_AMBIENT") {
		t.Error("istiod's env leaked into ztunnel's")
	}
}

func TestAmbientValidate(t *testing.T) {
	t.Parallel()
	dir := chartsDir(t)
	v := ambientValues(t)
	in := New(WithCharts(dir), WithAmbient(true))
	tgt := Target{Target: targetOf("cluster1", v)}
	tgt.Kubeconfig = "/nonexistent"
	if err := in.Validate(tgt); err == nil || !strings.Contains(err.Error(), `cluster "cluster1": ambient mode runs meshctl's proxy as ztunnel`) {
		t.Errorf("no Ztunnel: %v", err)
	}
	plain := Images{}.Apply(map[string]any{"global": map[string]any{"istioNamespace": "istio-system"}})
	tgt = Target{Target: targetOf("cluster2", plain), Ztunnel: testZtunnel}
	tgt.Kubeconfig = "/nonexistent"
	if err := in.Validate(tgt); err == nil || !strings.Contains(err.Error(), "--profile ambient") {
		t.Errorf("values without ambient: %v", err)
	}
	tgt = Target{Target: targetOf("cluster1", v), Ztunnel: testZtunnel}
	tgt.Kubeconfig = "/nonexistent"
	if err := in.Validate(tgt); err != nil {
		t.Errorf("ambient values with a proxy image: %v", err)
	}
}

func targetOf(cluster string, v map[string]any) installer.Target {
	return installer.Target{Cluster: cluster, Values: v}
}

// TestCNIValuesKeepUserDNSCapture: a user's cni.ambient.dnsCapture stands,
// and the cluster's values are not changed in place.
func TestCNIValuesKeepUserDNSCapture(t *testing.T) {
	t.Parallel()
	v := map[string]any{"cni": map[string]any{"ambient": map[string]any{"enabled": true, "dnsCapture": true}}}
	got := testZtunnel.cniValues(v)
	if amb := got["cni"].(map[string]any)["ambient"].(map[string]any); amb["dnsCapture"] != true || amb["enabled"] != true {
		t.Errorf("cni.ambient = %v, want the user's dnsCapture and enabled kept", amb)
	}
	plain := map[string]any{"cni": map[string]any{"ambient": map[string]any{"enabled": true}}}
	got = testZtunnel.cniValues(plain)
	if amb := got["cni"].(map[string]any)["ambient"].(map[string]any); amb["dnsCapture"] != false || amb["enabled"] != true {
		t.Errorf("cni.ambient = %v, want dnsCapture false beside enabled", amb)
	}
	if _, set := plain["cni"].(map[string]any)["ambient"].(map[string]any)["dnsCapture"]; set {
		t.Error("cniValues changed the cluster's values in place")
	}
}
