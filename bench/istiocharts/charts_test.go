package istiocharts

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/connect/remotesecret"
	"github.com/meshctl/meshctl/pkg/install/values"
	"github.com/meshctl/meshctl/pkg/meshca"
)

var (
	istioDirOnce sync.Once
	istioDir     string
	istioDirErr  error
)

// moduleDir is the istio.io/istio module's directory in the module cache,
// at the version bench/go.mod pins.
func moduleDir(t *testing.T) string {
	t.Helper()
	istioDirOnce.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio").Output()
		istioDir, istioDirErr = strings.TrimSpace(string(out)), err
		if err == nil && istioDir == "" {
			istioDirErr = fmt.Errorf("module not downloaded (go mod download istio.io/istio)")
		}
	})
	if istioDirErr != nil {
		t.Fatalf("finding the istio.io/istio module: %v", istioDirErr)
	}
	return istioDir
}

func loadChart(t *testing.T, rel string) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(filepath.Join(moduleDir(t), "manifests/charts", rel))
	if err != nil {
		t.Fatalf("loading Istio's chart %s: %v", rel, err)
	}
	return ch
}

// object is one rendered Kubernetes object, as far as these tests look.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	raw map[string]any
}

func (o object) key() string { return o.Kind + " " + o.Metadata.Namespace + "/" + o.Metadata.Name }

// render renders ch as `helm install <release> -n istio-system` would, CRDs
// (crds/) included, and returns its objects.
func render(t *testing.T, ch *chart.Chart, release string, vals map[string]any) []object {
	t.Helper()
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: "istio-system", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatalf("%s values: %v", ch.Name(), err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatalf("rendering Istio's %s chart: %v", ch.Name(), err)
	}
	var docs []string
	for name, f := range files {
		if strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") {
			for _, d := range releaseutil.SplitManifests(f) {
				docs = append(docs, d)
			}
		}
	}
	for _, c := range ch.CRDObjects() {
		for _, d := range releaseutil.SplitManifests(string(c.File.Data)) {
			docs = append(docs, d)
		}
	}
	var out []object
	for _, d := range docs {
		var o object
		if err := yaml.Unmarshal([]byte(d), &o); err != nil || o.Kind == "" {
			continue
		}
		_ = yaml.Unmarshal([]byte(d), &o.raw)
		if o.Metadata.Namespace == "" && namespaced(o.Kind) {
			o.Metadata.Namespace = "istio-system"
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

func namespaced(kind string) bool {
	switch kind {
	case "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "MutatingWebhookConfiguration",
		"ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Namespace":
		return false
	}
	return true
}

// meshctlObjects are the objects meshctl creates in a cluster that Istio's
// charts install into, by kind and name.
func meshctlObjects() []string {
	ns := remotesecret.Namespace
	out := []string{
		"ServiceAccount " + ns + "/" + remotesecret.ServiceAccount,
		"Secret " + ns + "/" + remotesecret.TokenSecret,
		"ClusterRole /" + remotesecret.ClusterRole,
		"ClusterRoleBinding /" + remotesecret.ClusterRole,
		"Secret " + meshca.Namespace + "/" + meshca.SecretName,
		"Service " + gateway.GatewayNamespace + "/" + gateway.GatewayName,
	}
	for _, c := range []string{"cluster1", "primary", "remote"} {
		out = append(out, "Secret "+ns+"/"+remotesecret.SecretPrefix+c)
	}
	return out
}

// TestMeshctlNamesAreNotIstios renders Istio's base and istiod charts, with
// their defaults and with every role's values, and finds none of the names
// meshctl gives its objects among theirs: `helm install` of Istio's charts
// after `meshctl up` would otherwise fail ("exists and cannot be imported
// into the current release"), as it did with istio-reader-service-account.
func TestMeshctlNamesAreNotIstios(t *testing.T) {
	t.Parallel()
	plan := shapePlan(t, "valid-istio-shape-external-istiod-multicluster.json")
	rendered, err := values.New(values.WithIstiodAddress("cp", "172.18.200.9")).Render(plan)
	if err != nil {
		t.Fatal(err)
	}
	sets := []map[string]any{{}}
	for _, c := range rendered {
		sets = append(sets, c.Values)
	}
	istios := map[string]string{}
	for _, vals := range sets {
		for _, ch := range []struct{ path, release string }{{"base", "istio-base"}, {"istio-control/istio-discovery", "istiod"}} {
			for _, o := range render(t, loadChart(t, ch.path), ch.release, vals) {
				istios[o.key()] = ch.release
			}
		}
	}
	if _, ok := istios["ServiceAccount istio-system/istio-reader-service-account"]; !ok {
		t.Fatal("Istio's base chart no longer renders istio-reader-service-account: this test would prove nothing")
	}
	for _, m := range meshctlObjects() {
		if rel, ok := istios[m]; ok {
			t.Errorf("meshctl creates %s, which Istio's %s chart owns", m, rel)
		}
	}
}
