package app

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestDryRunExistingClusters(t *testing.T) {
	t.Parallel()
	topology := filepath.Join(testdata, "topology/valid-existing-mixed.json")
	d := dryRunJSON(t, "--topology", topology)
	if len(d.Clusters) != 3 {
		t.Fatalf("%d clusters", len(d.Clusters))
	}
	for _, c := range d.Clusters {
		if c.Existing != (c.KindConfig == nil) {
			t.Errorf("%s: existing %v but kind config %v", c.Name, c.Existing, c.KindConfig)
		}
	}
	abs, _ := filepath.Abs(filepath.Join(testdata, "topology/kubeconfigs/cloud.yaml"))
	if c := d.Clusters[1]; !c.Existing || c.Kubeconfig != abs || c.Context != "gke_prod" {
		t.Errorf("cloud: %+v", c)
	}
	code, out, errOut := run(t, "up", "--topology", topology, "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{"cloud (existing cluster: used as it is, never created or deleted)", "context:          gke_prod", "subnets:          discovered from the cluster by up", "local (kind cluster local)"} {
		if !strings.Contains(out, w) {
			t.Errorf("dry run lacks %q:\n%s", w, out)
		}
	}
}
