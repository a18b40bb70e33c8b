package records

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// Local and existing-cluster records come back as written, owner-only, and
// a corrupt local record is skipped with a warning rather than failing
// every listing.
func TestLocalRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rec := model.Record{Env: "e", Version: "v", CreatedAt: time.Unix(1, 0).UTC(),
		Cluster: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "c1", KindName: "e-c1", Network: "network-1"}}}
	kind := filepath.Join(dir, "e", "c1", LocalFile)
	if err := WriteLocal(kind, rec, true); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(dir, "e", "c2", LocalFile)
	if err := WritePrivate(corrupt, []byte("{")); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	got := ReadLocal([]string{kind, corrupt}, func(f string, args ...any) { warnings = append(warnings, f) })
	if len(got) != 1 || !got[0].InProgress || !reflect.DeepEqual(got[0].Record, rec) {
		t.Errorf("read back %+v, want %+v in progress", got, rec)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "corrupt") {
		t.Errorf("warnings %q, want one about the corrupt record", warnings)
	}
	for _, f := range []string{kind, filepath.Dir(kind)} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]os.FileMode{false: 0o600, true: 0o700}[st.IsDir()]; st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", f, st.Mode().Perm(), want)
		}
	}

	ext := rec
	ext.Cluster = model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "ext", Existing: true, Kubeconfig: "/k"},
		Discovery: &model.Discovery{Server: "https://10.0.0.1:6443", Version: "v1.33.2", Nodes: 1}}
	path := filepath.Join(dir, "e", "ext", ExistingFile)
	if err := WriteExisting(path, ext); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadExisting([]string{path})
	if err != nil || len(recs) != 1 || !reflect.DeepEqual(recs[0], ext) {
		t.Errorf("read back %+v %v, want %+v", recs, err, ext)
	}
	if err := WritePrivate(path, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadExisting([]string{path}); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("a corrupt existing-cluster record: %v, want an error naming it corrupt", err)
	}
}
