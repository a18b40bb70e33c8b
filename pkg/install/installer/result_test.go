package installer

import "testing"

// With -o json the result is on stdout: the command's error, on stderr,
// must carry each failed cluster's cause itself.
func TestResultErrNamesEachCause(t *testing.T) {
	res := &Result{Clusters: []ClusterResult{
		{Cluster: "cluster1", Error: `istio-base: CRD "x" exists`},
		{Cluster: "cluster2"},
		{Cluster: "cluster3", Error: "timed out"},
	}}
	want := `install failed in cluster(s) cluster1 (istio-base: CRD "x" exists); cluster3 (timed out)`
	if err := res.Err("install"); err == nil || err.Error() != want {
		t.Fatalf("Err = %v, want %q", err, want)
	}
	if err := (&Result{Clusters: []ClusterResult{{Cluster: "cluster1"}}}).Err("install"); err != nil {
		t.Fatalf("no failed cluster: got %v", err)
	}
}
