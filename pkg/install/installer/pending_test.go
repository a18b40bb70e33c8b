package installer

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	helmtime "helm.sh/helm/v3/pkg/time"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// memoryHelm is a Helm configuration on the SDK's in-memory release
// storage and a kube client that accepts everything.
func memoryHelm(t *testing.T) *action.Configuration {
	t.Helper()
	return &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}
}

func demoChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "demo", Version: "1.0.0"},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\ndata:\n  v: {{ .Values.v | quote }}\n")}},
	}
}

// stuck stores revision rev of the demo release in status, begun at since.
func stuck(t *testing.T, cfg *action.Configuration, rev int, status release.Status, since time.Time) {
	t.Helper()
	rel := &release.Release{Name: "demo", Namespace: "istio-system", Version: rev, Chart: demoChart(), Config: map[string]any{},
		Info: &release.Info{Status: status, FirstDeployed: helmtime.Time{Time: since}, LastDeployed: helmtime.Time{Time: since}}}
	if err := cfg.Releases.Create(rel); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseLeftPendingIsRecovered: a run died mid-install (or
// mid-upgrade) and left the release pending-*; Helm refuses any further
// operation on it. The next install clears it and succeeds; a pending
// release younger than the timeout (maybe another run at work) is refused
// with a clear error instead of being clobbered.
func TestReleaseLeftPendingIsRecovered(t *testing.T) {
	t.Parallel()
	in := New(WithWait(false), WithTimeout(time.Minute))
	ctx := context.Background()
	values := map[string]any{"v": "x"}

	cfg := memoryHelm(t)
	stuck(t, cfg, 1, release.StatusPendingInstall, time.Now().Add(-time.Hour))
	if r := in.installChart(ctx, cfg, "istio-system", "demo", demoChart(), values); r.Error != "" || r.Action != ActionInstalled {
		t.Fatalf("after a stuck first install: %+v", r)
	}
	if last, err := cfg.Releases.Last("demo"); err != nil || last.Info.Status != release.StatusDeployed {
		t.Fatalf("release after recovery: %v, %v", last.Info.Status, err)
	}

	cfg = memoryHelm(t)
	stuck(t, cfg, 1, release.StatusDeployed, time.Now().Add(-2*time.Hour))
	stuck(t, cfg, 2, release.StatusPendingUpgrade, time.Now().Add(-time.Hour))
	if r := in.installChart(ctx, cfg, "istio-system", "demo", demoChart(), values); r.Error != "" || r.Action != ActionUpgraded {
		t.Fatalf("after a stuck upgrade: %+v", r)
	}

	cfg = memoryHelm(t)
	stuck(t, cfg, 1, release.StatusPendingInstall, time.Now())
	r := in.installChart(ctx, cfg, "istio-system", "demo", demoChart(), values)
	if r.Error == "" || !strings.Contains(r.Error, "another install may be running") {
		t.Fatalf("a fresh pending-install was not left alone: %+v", r)
	}
}

// noDiscovery is a cluster whose API cannot be discovered: a Helm
// configuration on it fails any render that asks for the cluster's
// capabilities, and counts the asks.
type noDiscovery struct{ asked int }

func (n *noDiscovery) ToRESTConfig() (*rest.Config, error) {
	n.asked++
	return nil, errors.New("no cluster here")
}

func (n *noDiscovery) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	n.asked++
	return nil, errors.New("no cluster here")
}

func (n *noDiscovery) ToRESTMapper() (meta.RESTMapper, error) {
	n.asked++
	return nil, errors.New("no cluster here")
}

func (n *noDiscovery) ToRawKubeConfigLoader() clientcmd.ClientConfig { return nil }

// deployed stores revision 1 of the demo release of chart c with values,
// deployed, as the Secrets driver would give it back (JSON round trip).
func deployed(t *testing.T, cfg *action.Configuration, c *chart.Chart, values map[string]any) {
	t.Helper()
	rel := &release.Release{Name: "demo", Namespace: "istio-system", Version: 1, Chart: c, Config: values,
		Info: &release.Info{Status: release.StatusDeployed}}
	b, err := json.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	var stored release.Release
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Releases.Create(&stored); err != nil {
		t.Fatal(err)
	}
}

// TestUnchangedWithoutRendering: re-installing the chart and values a
// release already has is "unchanged" without rendering anything, so a
// no-op re-run does not discover the cluster's API; a chart whose
// templates read the cluster, or new values, are still rendered and
// compared.
func TestUnchangedWithoutRendering(t *testing.T) {
	t.Parallel()
	in := New(WithWait(false), WithTimeout(time.Minute))
	ctx := context.Background()
	values := map[string]any{"v": "x", "n": 3}
	lookupChart := demoChart()
	lookupChart.Templates = append(lookupChart.Templates, &chart.File{Name: "templates/lookup.yaml",
		Data: []byte(`{{- if lookup "v1" "Namespace" "" "kube-system" }}{{ end }}`)})

	for _, tc := range []struct {
		name       string
		deployed   *chart.Chart
		installing *chart.Chart
		values     map[string]any
		renders    bool
	}{
		{name: "same chart and values", deployed: demoChart(), installing: demoChart(), values: values},
		{name: "new values", deployed: demoChart(), installing: demoChart(), values: map[string]any{"v": "y", "n": 3}, renders: true},
		{name: "a template that reads the cluster", deployed: lookupChart, installing: lookupChart, values: values, renders: true},
		{name: "a changed template", deployed: demoChart(), installing: func() *chart.Chart {
			c := demoChart()
			c.Templates[0].Data = append(c.Templates[0].Data, "  w: z\n"...)
			return c
		}(), values: values, renders: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := memoryHelm(t)
			cluster := &noDiscovery{}
			cfg.Capabilities, cfg.RESTClientGetter = nil, cluster
			deployed(t, cfg, tc.deployed, values)
			last, err := cfg.Releases.Last("demo")
			if err != nil {
				t.Fatal(err)
			}
			same, err := in.unchanged(ctx, cfg, "istio-system", "demo", tc.installing, tc.values, last)
			if !tc.renders {
				if err != nil || !same || cluster.asked != 0 {
					t.Fatalf("unchanged = %v, %v after %d asks of the cluster; want true, nil, none", same, err, cluster.asked)
				}
				return
			}
			// Rendering needs the cluster, which this one cannot give.
			if err == nil || cluster.asked == 0 {
				t.Fatalf("unchanged = %v, %v after %d asks of the cluster; want a render that failed on the cluster", same, err, cluster.asked)
			}
		})
	}
}
