package meshtest

import (
	"slices"
	"testing"

	"github.com/onsi/ginkgo/v2/types"
)

// The failure summary goes where the failed specs' artifacts went, even
// when the suite's environment is gone by the end (each container made its
// own) or the specs ran on other parallel processes.
func TestSummaryDirs(t *testing.T) {
	failed := func(dir string) types.SpecReport {
		return types.SpecReport{State: types.SpecStateFailed, ReportEntries: types.ReportEntries{
			{Name: "other", Value: types.WrapEntryValue("/elsewhere/x")},
			{Name: artifactsEntry, Value: types.WrapEntryValue(dir)},
		}}
	}
	r := types.Report{SpecReports: types.SpecReports{
		failed("/a/env1/failures/spec-one"),
		failed("/a/env2/failures/spec-two"),
		failed("/a/env1/failures/spec-three"),
		{State: types.SpecStatePassed},
	}}
	if got, want := summaryDirs(r, nil), []string{"/a/env1/failures", "/a/env2/failures"}; !slices.Equal(got, want) {
		t.Errorf("without an environment: %v, want %v", got, want)
	}
	e := &Env{}
	e.desc.Artifacts, e.desc.Env = "/a", "env3"
	if got, want := summaryDirs(r, e), []string{"/a/env3/failures", "/a/env1/failures", "/a/env2/failures"}; !slices.Equal(got, want) {
		t.Errorf("with environment env3: %v, want %v", got, want)
	}
	if got := summaryDirs(types.Report{}, nil); len(got) != 0 {
		t.Errorf("no failures, no environment: %v", got)
	}
}
