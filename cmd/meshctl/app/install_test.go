package app

import (
	"testing"

	"github.com/meshctl/meshctl/pkg/install/installer"
)

// With -o json the result is on stdout: the command's error, on stderr,
// must carry each failed cluster's cause itself.
func TestFailedClustersNamesEachCause(t *testing.T) {
	res := &installer.Result{Clusters: []installer.ClusterResult{
		{Cluster: "cluster1", Error: `istio-base: CRD "x" exists`},
		{Cluster: "cluster2"},
		{Cluster: "cluster3", Error: "timed out"},
	}}
	err := failedClusters("install", res)
	want := `install failed in cluster(s) cluster1 (istio-base: CRD "x" exists); cluster3 (timed out)`
	if err == nil || err.Error() != want {
		t.Fatalf("failedClusters = %v, want %q", err, want)
	}
	if err := failedClusters("install", &installer.Result{Clusters: []installer.ClusterResult{{Cluster: "cluster1"}}}); err != nil {
		t.Fatalf("no failed cluster: got %v", err)
	}
}
