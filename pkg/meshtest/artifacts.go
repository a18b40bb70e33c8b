package meshtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"

	"github.com/onsi/ginkgo/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/internal/fsutil"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// logLimit bounds each container's log in the artifacts: the end of a log
// is what explains a failure, and CI artifact stores have quotas.
const logLimit = 1 << 20

// CollectArtifacts writes what explains a failure into dir:
//
//	env.json                    the environment (names, networks, roles, kubeconfig paths)
//	status.json                 `meshctl status -o json` of the environment
//	<cluster>/nodes.yaml        the Node objects
//	<cluster>/pods.txt          every pod: phase, readiness, restarts, node, IP
//	<cluster>/events.txt        every event, oldest first
//	<cluster>/logs/<namespace>/<pod>/<container>.log   (and .previous.log after a restart)
//
// Clusters are read at once; what can be read is written even when
// something else fails, and the error then says what is missing.
func (e *Env) CollectArtifacts(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("meshtest: artifacts: %w", err)
	}
	var errs []error
	if err := writeJSON(filepath.Join(dir, "env.json"), e.desc); err != nil {
		errs = append(errs, err)
	}
	if e.prov != nil {
		status := mesh.NewStatus(mesh.NewConfig(e.prov, mesh.WithLogger(e.logger)))
		status.Registry = e.desc.Registry
		st, err := status.Run(ctx, e.desc.Env)
		if err == nil {
			err = writeJSON(filepath.Join(dir, "status.json"), st)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("status: %w", err))
		}
	}
	errs = append(errs, parallel.ForEach(e.clusters, func(c *Cluster) error {
		return c.collect(ctx, filepath.Join(dir, c.Name))
	}))
	if err := joinErrors(errs); err != nil {
		return fmt.Errorf("meshtest: artifacts in %s are incomplete: %w", dir, err)
	}
	return nil
}

func (c *Cluster) collect(ctx context.Context, dir string) error {
	var errs []error
	fail := func(what string, err error) { errs = append(errs, fmt.Errorf("cluster %s: %s: %w", c.Name, what, err)) }
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	if nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		fail("listing nodes", err)
	} else {
		// Typed lists come without their type: say it, as kubectl does.
		nodes.APIVersion, nodes.Kind = "v1", "NodeList"
		if err := writeYAML(filepath.Join(dir, "nodes.yaml"), nodes); err != nil {
			fail("nodes", err)
		}
	}
	if events, err := c.Kube.CoreV1().Events("").List(ctx, metav1.ListOptions{}); err != nil {
		fail("listing events", err)
	} else if err := writeText(filepath.Join(dir, "events.txt"), func(w io.Writer) { printEvents(w, events.Items) }); err != nil {
		fail("events", err)
	}
	pods, err := c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("listing pods", err)
		return joinErrors(errs)
	}
	if err := writeText(filepath.Join(dir, "pods.txt"), func(w io.Writer) { printPods(w, pods.Items) }); err != nil {
		fail("pods", err)
	}
	logErrs := parallel.ForEach(pods.Items, func(p corev1.Pod) error { return c.collectLogs(ctx, dir, &p) })
	if logErrs != nil {
		errs = append(errs, logErrs)
	}
	return joinErrors(errs)
}

// collectLogs writes the logs of a pod's containers (init ones too), and of
// their previous instance when they restarted: the crash is in that one.
func (c *Cluster) collectLogs(ctx context.Context, dir string, p *corev1.Pod) error {
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	var errs []error
	for _, cs := range statuses {
		if cs.State.Waiting != nil && cs.RestartCount == 0 && cs.LastTerminationState.Terminated == nil {
			continue // never ran: no log to ask for
		}
		for _, previous := range []bool{false, true} {
			if previous && cs.RestartCount == 0 {
				continue
			}
			limit := int64(logLimit)
			raw, err := c.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, Previous: previous, LimitBytes: &limit}).DoRaw(ctx)
			if err != nil {
				errs = append(errs, fmt.Errorf("cluster %s: logs of %s/%s/%s: %w", c.Name, p.Namespace, p.Name, cs.Name, err))
				continue
			}
			name := cs.Name + ".log"
			if previous {
				name = cs.Name + ".previous.log"
			}
			path := filepath.Join(dir, "logs", p.Namespace, p.Name, name)
			err = os.MkdirAll(filepath.Dir(path), 0o755)
			if err == nil {
				err = fsutil.WriteFile(path, raw, 0o644)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return joinErrors(errs)
}

func printPods(w io.Writer, pods []corev1.Pod) {
	sort.Slice(pods, func(i, j int) bool {
		return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tPHASE\tREADY\tRESTARTS\tNODE\tIP\tPROBLEM")
	for i := range pods {
		p := &pods[i]
		restarts := int32(0)
		for _, cs := range p.Status.ContainerStatuses {
			restarts += cs.RestartCount
		}
		problem := ""
		if !podReady(p) && p.Status.Phase != corev1.PodSucceeded {
			problem = podProblem(p)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Status.Phase, podReady(p), restarts, p.Spec.NodeName, p.Status.PodIP, problem)
	}
	tw.Flush()
}

func printEvents(w io.Writer, events []corev1.Event) {
	when := func(e *corev1.Event) time.Time {
		switch {
		case !e.LastTimestamp.IsZero():
			return e.LastTimestamp.Time
		case !e.EventTime.IsZero():
			return e.EventTime.Time
		}
		return e.CreationTimestamp.Time
	}
	sort.SliceStable(events, func(i, j int) bool { return when(&events[i]).Before(when(&events[j])) })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tTYPE\tNAMESPACE\tOBJECT\tREASON\tCOUNT\tMESSAGE")
	for i := range events {
		e := &events[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\t%d\t%s\n", when(e).UTC().Format(time.RFC3339), e.Type, e.Namespace,
			strings.ToLower(e.InvolvedObject.Kind), e.InvolvedObject.Name, e.Reason, e.Count, strings.TrimSpace(e.Message))
	}
	tw.Flush()
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	return fsutil.WriteFile(path, append(b, '\n'), 0o644)
}

func writeYAML(path string, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	return fsutil.WriteFile(path, b, 0o644)
}

func writeText(path string, f func(io.Writer)) error {
	var b strings.Builder
	f(&b)
	return fsutil.WriteFile(path, []byte(b.String()), 0o644)
}

func joinErrors(errs []error) error {
	var keep []error
	for _, e := range errs {
		if e != nil {
			keep = append(keep, e)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	msgs := make([]string, len(keep))
	for i, e := range keep {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// ReportFailures installs, with one call at the top level of a suite, the
// hooks that save artifacts when something fails:
//
//	var env *meshtest.Env
//	var _ = meshtest.ReportFailures(&env)
//
// A failed spec gets CollectArtifacts into
// <artifacts>/<env>/failures/<spec>/, run as soon as the failing node
// returns — before the spec's AfterEach and DeferCleanup (which would
// delete its namespaces) — on whichever parallel process ran it; the spec's
// report names the directory. After the suite, process 1 writes
// <artifacts>/<env>/failures/summary.txt: each failed spec, its failure and
// its artifacts — for every environment a failed spec's artifacts went to,
// so also for suites whose containers each make and drop their own. JUnit XML is Ginkgo's own: -ginkgo.junit-report=report.xml.
func ReportFailures(env **Env) bool {
	ginkgo.BeforeEach(func() {
		ginkgo.DeferOnFailure(func(ctx ginkgo.SpecContext) {
			e := *env
			if e == nil {
				return // the environment was never made: Setup said why
			}
			dir := e.failureDir(ginkgo.CurrentSpecReport())
			if err := e.CollectArtifacts(ctx, dir); err != nil {
				ginkgo.GinkgoWriter.Printf("%v\n", err)
			}
			ginkgo.AddReportEntry(artifactsEntry, dir)
		}, ginkgo.NodeTimeout(2*time.Minute))
	})
	ginkgo.ReportAfterSuite("meshtest failure summary", func(r ginkgo.Report) {
		if r.SuiteSucceeded {
			return
		}
		for _, dir := range summaryDirs(r, *env) {
			path := filepath.Join(dir, "summary.txt")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				ginkgo.GinkgoWriter.Printf("meshtest: %v\n", err)
				continue
			}
			if err := writeText(path, func(w io.Writer) { printSummary(w, r) }); err != nil {
				ginkgo.GinkgoWriter.Printf("meshtest: %v\n", err)
			}
		}
	})
	return true
}

// summaryDirs are the failures directories the summary goes to: each one a
// failed spec's artifacts went into (a suite whose containers each make
// their own environment has already let go of it by now, and in parallel
// runs the spec ran on another process), and the environment's own if it
// still exists.
func summaryDirs(r ginkgo.Report, e *Env) []string {
	var dirs []string
	add := func(d string) {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	if e != nil {
		add(filepath.Join(e.Artifacts(), e.Name(), "failures"))
	}
	for _, s := range r.SpecReports {
		for _, entry := range s.ReportEntries {
			if entry.Name == artifactsEntry {
				add(filepath.Dir(entry.StringRepresentation()))
			}
		}
	}
	return dirs
}

// artifactsEntry names the report entry that holds a failed spec's
// artifacts directory.
const artifactsEntry = "meshtest artifacts"

func printSummary(w io.Writer, r ginkgo.Report) {
	failed := 0
	for _, s := range r.SpecReports {
		if s.Failed() {
			failed++
		}
	}
	fmt.Fprintf(w, "Suite %q failed: %d spec(s)", r.SuiteDescription, failed)
	if len(r.SpecialSuiteFailureReasons) > 0 {
		fmt.Fprintf(w, "; %s", strings.Join(r.SpecialSuiteFailureReasons, "; "))
	}
	fmt.Fprintln(w)
	for _, s := range r.SpecReports {
		if !s.Failed() {
			continue
		}
		fmt.Fprintf(w, "\n%s: %s\n  %s\n  at %s\n", s.State, s.FullText(), strings.ReplaceAll(strings.TrimSpace(s.Failure.Message), "\n", "\n  "), s.Failure.Location)
		for _, entry := range s.ReportEntries {
			if entry.Name == artifactsEntry {
				fmt.Fprintf(w, "  artifacts: %s\n", entry.StringRepresentation())
			}
		}
	}
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// failureDir is a fresh directory name for a failed spec: its text, made
// safe for file systems and cut short, then a number if taken (a spec can
// fail on several processes, or in several attempts).
func (e *Env) failureDir(s ginkgo.SpecReport) string {
	name := strings.Trim(unsafeChars.ReplaceAllString(s.FullText(), "-"), "-")
	if name == "" {
		name = s.LeafNodeType.String()
	}
	if len(name) > 80 {
		name = name[:80]
	}
	base := filepath.Join(e.Artifacts(), e.Name(), "failures", name)
	dir := base
	for i := 2; ; i++ {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return dir
		}
		if err := os.Mkdir(dir, 0o755); err == nil || !os.IsExist(err) {
			return dir
		}
		dir = fmt.Sprintf("%s-%d", base, i)
	}
}
