package installer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/meshctl/meshctl/pkg/install/charts"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// Release actions reported per chart and cluster.
const (
	ActionInstalled   = "installed"
	ActionUpgraded    = "upgraded"
	ActionUnchanged   = "unchanged"
	ActionRolledBack  = "rolled back"
	ActionUninstalled = "uninstalled"
	ActionAbsent      = "not installed"
	ActionFailed      = "failed"
	ActionSkipped     = "skipped"
)

// DefaultNamespace is where the charts go unless the values'
// global.istioNamespace says otherwise.
const DefaultNamespace = "istio-system"

// DefaultTimeout bounds each release's install or upgrade, wait included.
const DefaultTimeout = 5 * time.Minute

// Installer installs and uninstalls the charts.
type Installer struct {
	fsys     fs.FS
	names    []string
	releases []string
	timeout  time.Duration
	wait     bool
	poll     time.Duration
	debug    func(format string, v ...any)
	clients  *kubeclient.Factory
}

// Option configures an Installer.
type Option func(*Installer)

// WithCharts replaces the embedded charts: fsys holds one directory per
// chart, installed in the order of names.
func WithCharts(fsys fs.FS, names ...string) Option {
	return func(i *Installer) { i.fsys, i.names = fsys, names }
}

// WithReleaseNames names the release of each chart, in the order of the
// charts (default: the chart's name). Istio's charts are installed as
// istio-base and istiod, as Istio's docs name them.
func WithReleaseNames(names ...string) Option { return func(i *Installer) { i.releases = names } }

// WithTimeout bounds each release's install or upgrade (default 5m).
func WithTimeout(d time.Duration) Option { return func(i *Installer) { i.timeout = d } }

// WithWait waits for every workload to be ready before a release counts as
// installed (default true). Without a kubelet (an API server alone, in
// tests) nothing ever becomes ready: there it must be off.
func WithWait(b bool) Option { return func(i *Installer) { i.wait = b } }

// WithDebug receives Helm's debug log.
func WithDebug(f func(format string, v ...any)) Option { return func(i *Installer) { i.debug = f } }

// WithClients shares a kube-client factory (default: none, every call
// builds its own clients).
func WithClients(f *kubeclient.Factory) Option { return func(i *Installer) { i.clients = f } }

// New returns an Installer of the embedded charts.
func New(opts ...Option) *Installer {
	i := &Installer{fsys: charts.FS, names: charts.Names, timeout: DefaultTimeout, wait: true, poll: time.Second,
		debug: func(string, ...any) {}}
	for _, o := range opts {
		o(i)
	}
	return i
}

// Target is one cluster to install into.
type Target struct {
	Cluster    string         // the cluster's mesh name, for reports
	Kubeconfig string         // path of its kubeconfig
	Values     map[string]any // its values (values.Renderer's, plus the image)
	// ChartValues are the values of single charts, by chart directory, in
	// place of Values: charts that read one key differently (Istio's
	// ztunnel and istiod both read a top-level image and env) each get
	// their own.
	ChartValues map[string]map[string]any
}

// ValuesOf are the values t installs the chart in directory dir with.
func (t Target) ValuesOf(dir string) map[string]any {
	if v, ok := t.ChartValues[dir]; ok {
		return v
	}
	return t.Values
}

// Result is every cluster's outcome, in the order of the targets.
type Result struct {
	Clusters []ClusterResult `json:"clusters"`
}

// Err is the error of a result with failed clusters (nil without), naming
// each failed cluster with its cause: what ran is the verb ("install").
// The cause is in the message itself, not only in the printed result: with
// -o json that is on stdout, where a reader of stderr (a CI log, a test's
// failure message) does not look.
func (r *Result) Err(what string) error {
	var failed []string
	for _, c := range r.Clusters {
		if c.Error != "" {
			failed = append(failed, fmt.Sprintf("%s (%s)", c.Cluster, c.Error))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%s failed in cluster(s) %s", what, strings.Join(failed, "; "))
}

// ClusterResult is one cluster's outcome.
type ClusterResult struct {
	Cluster   string          `json:"cluster"`
	Namespace string          `json:"namespace"`
	Releases  []ReleaseResult `json:"releases"`
	Error     string          `json:"error,omitempty"`
}

// ReleaseResult is one chart's outcome in one cluster.
type ReleaseResult struct {
	Name     string `json:"name"`
	Chart    string `json:"chart"`
	Action   string `json:"action"`
	Revision int    `json:"revision,omitempty"`
	Error    string `json:"error,omitempty"`
	// manifest is the deployed release's: what waitRelease waits for.
	manifest string
}

// Failed reports whether any cluster failed.
func (r *Result) Failed() bool {
	for _, c := range r.Clusters {
		if c.Error != "" {
			return true
		}
	}
	return false
}

// Charts loads the charts, in install order.
func (i *Installer) Charts() ([]*chart.Chart, error) {
	out := make([]*chart.Chart, 0, len(i.names))
	for _, n := range i.names {
		var files []*loader.BufferedFile
		err := fs.WalkDir(i.fsys, n, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := fs.ReadFile(i.fsys, p)
			if err != nil {
				return err
			}
			files = append(files, &loader.BufferedFile{Name: strings.TrimPrefix(p, n+"/"), Data: data})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading chart %s: %w", n, err)
		}
		c, err := loader.LoadFiles(files)
		if err != nil {
			return nil, fmt.Errorf("loading chart %s: %w", n, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// Namespace is where values put the charts: global.istioNamespace.
func Namespace(values map[string]any) string {
	if g, ok := values["global"].(map[string]any); ok {
		if ns, ok := g["istioNamespace"].(string); ok && ns != "" {
			return ns
		}
	}
	return DefaultNamespace
}

// Render renders every chart with a cluster's values, as an install would,
// without a cluster: chart name → manifest (documents sorted by file name).
func (i *Installer) Render(values map[string]any) (map[string]string, error) {
	cs, err := i.Charts()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range cs {
		opts := chartutil.ReleaseOptions{Name: c.Name(), Namespace: Namespace(values), Revision: 1, IsInstall: true}
		vals, err := chartutil.ToRenderValues(c, values, opts, chartutil.DefaultCapabilities)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", c.Name(), err)
		}
		files, err := engine.Render(c, vals)
		if err != nil {
			return nil, fmt.Errorf("rendering chart %s: %w", c.Name(), err)
		}
		names := make([]string, 0, len(files))
		for n := range files {
			if strings.HasSuffix(n, ".yaml") && strings.TrimSpace(files[n]) != "" {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		var b bytes.Buffer
		for _, n := range names {
			fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", n, strings.TrimSpace(files[n]))
		}
		out[c.Name()] = b.String()
	}
	return out, nil
}

// Validate checks every target's values against the charts' schemas,
// naming the cluster and the offending key.
func (i *Installer) Validate(targets ...Target) error {
	cs, err := i.Charts()
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range targets {
		if t.Kubeconfig == "" {
			errs = append(errs, fmt.Errorf("cluster %q: no kubeconfig", t.Cluster))
		}
		for n, c := range cs {
			if err := validate(c, t.ValuesOf(i.names[n])); err != nil {
				errs = append(errs, fmt.Errorf("cluster %q: %w", t.Cluster, err))
				break // the charts share one schema: one report per cluster
			}
		}
	}
	return errors.Join(errs...)
}

func validate(c *chart.Chart, values map[string]any) error {
	merged, err := chartutil.CoalesceValues(c, values)
	if err != nil {
		return fmt.Errorf("values for chart %s: %w", c.Name(), err)
	}
	if err := chartutil.ValidateAgainstSchema(c, merged); err != nil {
		return fmt.Errorf("values do not match the schema of chart %s: %w", c.Name(), err)
	}
	return nil
}

// Reachable checks that every target's API server answers, concurrently,
// naming each that does not.
func (i *Installer) Reachable(ctx context.Context, targets ...Target) error {
	return i.reachable(ctx, targets)
}

// reachable checks every cluster's API server answers, concurrently.
func (i *Installer) reachable(ctx context.Context, targets []Target) error {
	return parallel.ForEach(targets, func(t Target) error {
		kc := i.clients.File(t.Kubeconfig, "", kubeclient.WithTimeout(15*time.Second))
		if _, err := kc.RESTConfig(); err != nil {
			return fmt.Errorf("cluster %q: kubeconfig %s: %w", t.Cluster, t.Kubeconfig, err)
		}
		dc, err := kc.Discovery()
		if err != nil {
			return fmt.Errorf("cluster %q: %w", t.Cluster, err)
		}
		if _, err := dc.ServerVersion(); err != nil {
			return fmt.Errorf("cluster %q is unreachable at %s: %w", t.Cluster, kc.Host(), err)
		}
		return nil
	})
}

// Install installs or upgrades every chart in every target, clusters in
// parallel, charts in order within a cluster. The error is about input
// (nothing was touched); per-cluster failures are in the result.
func (i *Installer) Install(ctx context.Context, targets ...Target) (*Result, error) {
	if err := i.Validate(targets...); err != nil {
		return nil, err
	}
	cs, err := i.Charts()
	if err != nil {
		return nil, err
	}
	if err := i.reachable(ctx, targets); err != nil {
		return nil, err
	}
	return i.each(targets, func(t Target, cfg *action.Configuration, ns string) []ReleaseResult {
		var out []ReleaseResult
		for n, c := range cs {
			r := i.installChart(ctx, cfg, ns, i.releaseName(n, c), c, t.ValuesOf(i.names[n]))
			if r.Error == "" && i.wait {
				if err := i.waitRelease(ctx, t, ns, r.manifest); err != nil {
					r.Error = err.Error()
				}
			}
			out = append(out, r)
			if r.Error != "" {
				// The next chart depends on this one (the proxy on the
				// agent): don't install it over a failure.
				for k := n + 1; k < len(cs); k++ {
					out = append(out, ReleaseResult{Name: i.releaseName(k, cs[k]), Chart: chartRef(cs[k]), Action: ActionSkipped})
				}
				break
			}
		}
		return out
	}), nil
}

// Uninstall removes every chart from every target, in reverse order. A
// chart that is not installed is reported, not an error.
func (i *Installer) Uninstall(ctx context.Context, targets ...Target) (*Result, error) {
	for _, t := range targets {
		if t.Kubeconfig == "" {
			return nil, fmt.Errorf("cluster %q: no kubeconfig", t.Cluster)
		}
	}
	// With release names given, uninstalling needs no chart: Istio's
	// come from a directory that may be gone by now.
	names, refs := i.releases, make([]string, len(i.releases))
	if len(names) == 0 {
		cs, err := i.Charts()
		if err != nil {
			return nil, err
		}
		for n, c := range cs {
			names, refs = append(names, i.releaseName(n, c)), append(refs, chartRef(c))
		}
	}
	if err := i.reachable(ctx, targets); err != nil {
		return nil, err
	}
	return i.each(targets, func(_ Target, cfg *action.Configuration, _ string) []ReleaseResult {
		var out []ReleaseResult
		for n := len(names) - 1; n >= 0; n-- {
			out = append(out, i.uninstallRelease(cfg, names[n], refs[n]))
		}
		return out
	}), nil
}

// releaseName is the release of the n-th chart.
func (i *Installer) releaseName(n int, c *chart.Chart) string {
	if n < len(i.releases) && i.releases[n] != "" {
		return i.releases[n]
	}
	return c.Name()
}

// each runs f for every target concurrently with a Helm configuration for
// the target's cluster and namespace.
func (i *Installer) each(targets []Target, f func(Target, *action.Configuration, string) []ReleaseResult) *Result {
	res := &Result{Clusters: make([]ClusterResult, len(targets))}
	var wg sync.WaitGroup
	for n, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns := Namespace(t.Values)
			cr := ClusterResult{Cluster: t.Cluster, Namespace: ns}
			defer func() { res.Clusters[n] = cr }()
			cfg, err := i.helmConfig(t, ns)
			if err != nil {
				cr.Error = err.Error()
				return
			}
			cr.Releases = f(t, cfg, ns)
			var failed []string
			for _, r := range cr.Releases {
				if r.Error != "" {
					failed = append(failed, r.Name+": "+r.Error)
				}
			}
			cr.Error = strings.Join(failed, "; ")
		}()
	}
	wg.Wait()
	return res
}

func (i *Installer) helmConfig(t Target, ns string) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig := t.Kubeconfig
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", i.debug); err != nil {
		return nil, fmt.Errorf("cluster %q: helm: %w", t.Cluster, err)
	}
	return cfg, nil
}

// longQuoted is a quoted string too long to read in an error: the API
// server quotes a whole object back in some rejections.
var longQuoted = regexp.MustCompile(`"(?:[^"\\]|\\.){160,}"`)

// shorten keeps an error readable: the cause stays, quoted objects go.
func shorten(msg string) string {
	return longQuoted.ReplaceAllString(msg, `"…"`)
}

// waitRelease waits until every DaemonSet and Deployment of a deployed
// release has all its Pods Ready (see WaitReady): "installed" means running.
func (i *Installer) waitRelease(ctx context.Context, t Target, ns, manifest string) error {
	ws, err := Workloads(manifest, ns)
	if err != nil || len(ws) == 0 {
		return err
	}
	kc := i.clients.File(t.Kubeconfig, "")
	if _, err := kc.RESTConfig(); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", t.Kubeconfig, err)
	}
	cs, err := kc.Kubernetes()
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return WaitReady(ctx, cs, ws, i.timeout, i.poll)
}

func chartRef(c *chart.Chart) string { return c.Name() + "-" + c.Metadata.Version }

func (i *Installer) installChart(ctx context.Context, cfg *action.Configuration, ns, name string, c *chart.Chart, values map[string]any) ReleaseResult {
	r := ReleaseResult{Name: name, Chart: chartRef(c)}
	fail := func(action string, err error) ReleaseResult {
		r.Action, r.Error = action, shorten(err.Error())
		return r
	}
	last, err := cfg.Releases.Last(name)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return fail(ActionFailed, fmt.Errorf("reading release history: %w", err))
	}
	if last != nil && last.Info.Status.IsPending() {
		if last, err = i.unstick(cfg, last); err != nil {
			return fail(ActionFailed, err)
		}
	}
	if last == nil || last.Info.Status == release.StatusUninstalled {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.CreateNamespace = name, ns, true
		// Helm's atomic implies waiting; without waiting, undo by hand.
		in.Atomic, in.Wait, in.Timeout = i.wait, i.wait, i.timeout
		rel, err := in.RunWithContext(ctx, c, values)
		if err != nil {
			if !i.wait {
				if _, uerr := action.NewUninstall(cfg).Run(name); uerr != nil {
					return fail(ActionFailed, fmt.Errorf("install: %w (and removing it again: %w)", err, uerr))
				}
			}
			// A failed install has been uninstalled again.
			return fail(ActionRolledBack, fmt.Errorf("install: %w", err))
		}
		r.Action, r.Revision, r.manifest = ActionInstalled, rel.Version, rel.Manifest
		return r
	}
	if unchanged, err := i.unchanged(ctx, cfg, ns, name, c, values, last); err != nil {
		return fail(ActionFailed, err)
	} else if unchanged {
		r.Action, r.Revision, r.manifest = ActionUnchanged, last.Version, last.Manifest
		return r
	}
	up := i.upgrade(cfg, ns)
	rel, err := up.RunWithContext(ctx, name, c, values)
	if err != nil {
		if !i.wait {
			rb := action.NewRollback(cfg)
			rb.Version, rb.Timeout, rb.MaxHistory = last.Version, i.timeout, up.MaxHistory
			if rerr := rb.Run(name); rerr != nil {
				return fail(ActionFailed, fmt.Errorf("upgrade: %w (and rolling back: %w)", err, rerr))
			}
		}
		// The release is back at its previous revision.
		return fail(ActionRolledBack, fmt.Errorf("upgrade: %w", err))
	}
	r.Action, r.Revision, r.manifest = ActionUpgraded, rel.Version, rel.Manifest
	return r
}

// unstick clears a release left pending-install, -upgrade or -rollback by
// a process that died mid-operation: Helm refuses every later operation on
// it ("another operation is in progress"). A release pending for less than
// the installer's timeout may be another run's work in progress, and is
// left alone. A stuck first install is uninstalled (nothing of it was
// ever deployed; the caller installs afresh, returning nil); a stuck
// upgrade or rollback is marked failed, and the upgrade that follows starts
// from the last deployed revision.
func (i *Installer) unstick(cfg *action.Configuration, last *release.Release) (*release.Release, error) {
	since := last.Info.LastDeployed.Time
	if last.Info.LastDeployed.IsZero() {
		since = last.Info.FirstDeployed.Time
	}
	if age := time.Since(since); age < i.timeout {
		return nil, fmt.Errorf("release %s is %s since %s: another install may be running; retry after %s",
			last.Name, last.Info.Status, since.Format(time.RFC3339), (i.timeout - age).Round(time.Second))
	}
	i.debug("release %s stuck in %s since %s: recovering", last.Name, last.Info.Status, since.Format(time.RFC3339))
	if last.Info.Status == release.StatusPendingInstall {
		if _, err := action.NewUninstall(cfg).Run(last.Name); err != nil {
			return nil, fmt.Errorf("removing release %s stuck in %s: %w", last.Name, last.Info.Status, err)
		}
		return nil, nil
	}
	last.SetStatus(release.StatusFailed, fmt.Sprintf("left %s by an interrupted operation", last.Info.Status))
	if err := cfg.Releases.Update(last); err != nil {
		return nil, fmt.Errorf("marking release %s stuck in %s failed: %w", last.Name, last.Info.Status, err)
	}
	return last, nil
}

func (i *Installer) upgrade(cfg *action.Configuration, ns string) *action.Upgrade {
	up := action.NewUpgrade(cfg)
	up.Namespace = ns
	// Helm's atomic implies waiting; without waiting, installChart undoes
	// a failure by hand.
	up.Atomic, up.Wait, up.Timeout = i.wait, i.wait, i.timeout
	// Values are always given in full: never reuse the last release's.
	up.ResetValues = true
	up.CleanupOnFail = true
	up.MaxHistory = 10
	return up
}

// unchanged reports whether the deployed release already is what an
// upgrade would produce: same chart version, same values, same manifest.
func (i *Installer) unchanged(ctx context.Context, cfg *action.Configuration, ns, name string, c *chart.Chart, values map[string]any, last *release.Release) (bool, error) {
	if last.Info.Status != release.StatusDeployed || last.Chart == nil || last.Chart.Metadata.Version != c.Metadata.Version {
		return false, nil
	}
	// The same chart with the same values renders the same manifest unless
	// its templates read the cluster: then nothing needs rendering, and
	// the cluster's API discovery (most of a re-run's requests) is skipped.
	if sameJSON(values, last.Config) && sameChart(c, last.Chart) && !readsCluster(c) {
		return true, nil
	}
	dry := i.upgrade(cfg, ns)
	dry.DryRun, dry.DryRunOption = true, "client"
	dry.Atomic, dry.Wait = false, false
	rel, err := dry.RunWithContext(ctx, name, c, values)
	if err != nil {
		return false, fmt.Errorf("rendering upgrade: %w", err)
	}
	if !sameJSON(rel.Config, last.Config) {
		return false, nil
	}
	if rel.Manifest == last.Manifest {
		return true, nil
	}
	// Charts may render differently on install and upgrade (Istio's
	// webhooks fail open on .Release.IsInstall only): render the deployed
	// values as an upgrade too, and compare like with like.
	prev, err := dry.RunWithContext(ctx, name, last.Chart, last.Config)
	if err != nil {
		return false, fmt.Errorf("rendering the deployed release: %w", err)
	}
	return rel.Manifest == prev.Manifest, nil
}

// sameChart reports whether the deployed release's chart is c: metadata,
// templates, default values, schema and files, as the release stores them.
// A chart with subcharts never is (a release does not store those).
func sameChart(c, deployed *chart.Chart) bool {
	if len(c.Dependencies()) > 0 || len(deployed.Dependencies()) > 0 {
		return false
	}
	return sameEncoding(c, deployed)
}

// clusterReads are what makes a template's output depend on the cluster
// it is rendered for rather than on the chart and values alone.
var clusterReads = regexp.MustCompile(`\.Capabilities\b|\blookup\b`)

// readsCluster reports whether any template of c reads the cluster.
func readsCluster(c *chart.Chart) bool {
	for _, t := range c.Templates {
		if clusterReads.Match(t.Data) {
			return true
		}
	}
	return false
}

// sameJSON compares values as stored: a release's values come back
// JSON-decoded (every number a float64), values built in memory do not.
func sameJSON(a, b map[string]any) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return sameEncoding(a, b)
}

// sameEncoding reports whether a and b encode to the same JSON, the form
// Helm stores a release's chart and values in.
func sameEncoding(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// uninstallRelease removes a release; chart names its chart where the
// release has none to say (it is not installed).
func (i *Installer) uninstallRelease(cfg *action.Configuration, name, chart string) ReleaseResult {
	r := ReleaseResult{Name: name, Chart: chart}
	last, err := cfg.Releases.Last(name)
	if err == nil && last.Chart != nil {
		r.Chart = chartRef(last.Chart)
	}
	switch {
	case errors.Is(err, driver.ErrReleaseNotFound) || (err == nil && last.Info.Status == release.StatusUninstalled):
		r.Action = ActionAbsent
		return r
	case err != nil:
		r.Action, r.Error = ActionFailed, fmt.Sprintf("reading release history: %v", err)
		return r
	}
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = i.wait, i.timeout
	if _, err := un.Run(name); err != nil {
		r.Action, r.Error = ActionFailed, fmt.Sprintf("uninstall: %v", err)
		return r
	}
	r.Action, r.Revision = ActionUninstalled, last.Version
	return r
}
