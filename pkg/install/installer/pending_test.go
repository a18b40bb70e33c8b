package installer

import (
	"context"
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
