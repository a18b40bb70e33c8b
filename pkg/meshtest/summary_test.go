package meshtest

import (
	"slices"
	"strings"
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

// The summary says how many specs failed and, for each, its text, message,
// location and artifacts; a suite-level failure (a BeforeSuite) is named.
func TestPrintSummary(t *testing.T) {
	r := types.Report{SuiteDescription: "mesh e2e", SpecReports: types.SpecReports{
		{State: types.SpecStatePassed, LeafNodeText: "passes"},
		{
			State: types.SpecStateFailed, ContainerHierarchyTexts: []string{"routes"}, LeafNodeText: "reach",
			Failure:       types.Failure{Message: "Timed out.\npod a could not reach b", Location: types.CodeLocation{FileName: "x_test.go", LineNumber: 7}},
			ReportEntries: types.ReportEntries{{Name: artifactsEntry, Value: types.WrapEntryValue("/a/env/failures/routes-reach")}},
		},
	}}
	var b strings.Builder
	printSummary(&b, r)
	want := `Suite "mesh e2e" failed: 1 spec(s)

failed: routes reach
  Timed out.
  pod a could not reach b
  at x_test.go:7
  artifacts: /a/env/failures/routes-reach
`
	if b.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", b.String(), want)
	}
	r.SpecialSuiteFailureReasons = []string{"Interrupted by User"}
	b.Reset()
	printSummary(&b, r)
	if first, _, _ := strings.Cut(b.String(), "\n"); first != `Suite "mesh e2e" failed: 1 spec(s); Interrupted by User` {
		t.Errorf("first line %q", first)
	}
}
