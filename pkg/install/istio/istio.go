package istio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshctl/meshctl/pkg/install/installer"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

const (
	// Module is Istio's Go module: its charts and its commands.
	Module = "istio.io/istio"
	// Version is the version of Module meshctl is built and tested with,
	// the one bench/go.mod requires (a test keeps them equal). The module
	// proxy serves Istio only as pseudo-versions of its main branch.
	Version = "v0.0.0-20260827124520-eed52ebb66ad"
	// DefaultHub is where hack/e2e/istio-build puts the images it builds
	// (meshctl/pilot:<Version>, meshctl/install-cni:<Version>).
	DefaultHub = "meshctl"
)

// DefaultTag is the tag of the offline-built images: the module version.
func DefaultTag() string { return Version }

// Release is one of Istio's charts and the release it is installed as.
type Release struct {
	Name  string // release name
	Chart string // directory under the charts directory
}

// Releases are Istio's charts meshctl installs, in install order; the
// first holds Istio's CRDs (a remote gets it early: prepareRemotes).
var Releases = []Release{
	{Name: "istio-base", Chart: "base"},
	{Name: "istiod", Chart: "istio-control/istio-discovery"},
}

// ChartsDir finds Istio's charts in the download of Module at version
// (`go mod download`, so the Go command and the module proxy, or a warm
// module cache, are needed); they are never copied anywhere.
func ChartsDir(ctx context.Context, version string) (string, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("finding Istio's charts: the Go command is not on PATH to download %s@%s: pass the charts directory with --istio-charts (Istio's manifests/charts)", Module, version)
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", Module+"@"+version)
	cmd.Dir = os.TempDir() // outside any module: the version is explicit
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var dl struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &dl); jerr == nil && dl.Error != "" {
		err = errors.New(dl.Error)
	}
	if err != nil || dl.Dir == "" {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("finding Istio's charts: go mod download %s@%s: %v (pass the charts directory with --istio-charts)", Module, version, err)
	}
	return filepath.Join(dl.Dir, "manifests", "charts"), nil
}

// CheckCharts says whether dir holds the charts of releases (default:
// Releases).
func CheckCharts(dir string, releases ...Release) error {
	if len(releases) == 0 {
		releases = Releases
	}
	for _, r := range releases {
		if _, err := os.Stat(filepath.Join(dir, r.Chart, "Chart.yaml")); err != nil {
			return fmt.Errorf("Istio charts directory %s has no chart %s (want Istio's manifests/charts): %w", dir, r.Chart, err)
		}
	}
	return nil
}

// Installer installs Istio's charts. Build it with New.
type Installer struct {
	charts  string
	ambient bool
	timeout time.Duration
	wait    bool
	debug   func(format string, v ...any)
	clients *kubeclient.Factory
}

// Option configures an Installer.
type Option func(*Installer)

// WithClients shares a kube-client factory (see installer.WithClients).
func WithClients(f *kubeclient.Factory) Option { return func(i *Installer) { i.clients = f } }

// WithCharts is the directory of Istio's charts (ChartsDir's).
func WithCharts(dir string) Option { return func(i *Installer) { i.charts = dir } }

// WithAmbient installs Istio in ambient mode (AmbientReleases): every
// target needs its Ztunnel, and values with istiod's ambient support on.
func WithAmbient(b bool) Option { return func(i *Installer) { i.ambient = b } }

// WithTimeout bounds each release's install, upgrade or uninstall.
func WithTimeout(d time.Duration) Option { return func(i *Installer) { i.timeout = d } }

// WithWait waits for istiod to be ready (default true; an API server with
// no kubelet, in tests, needs false).
func WithWait(b bool) Option { return func(i *Installer) { i.wait = b } }

// WithDebug receives Helm's debug log.
func WithDebug(f func(format string, v ...any)) Option { return func(i *Installer) { i.debug = f } }

// New returns an Installer.
func New(opts ...Option) *Installer {
	i := &Installer{timeout: installer.DefaultTimeout, wait: true, debug: func(string, ...any) {}}
	for _, o := range opts {
		o(i)
	}
	return i
}

// releases are the releases Install installs, in order.
func (i *Installer) releases() []Release {
	if i.ambient {
		return AmbientReleases
	}
	return Releases
}

func (i *Installer) helm() *installer.Installer { return i.helmOf(i.releases()) }

func (i *Installer) helmOf(releases []Release) *installer.Installer {
	dirs, names := make([]string, len(releases)), make([]string, len(releases))
	for n, r := range releases {
		dirs[n], names[n] = r.Chart, r.Name
	}
	return installer.New(installer.WithCharts(os.DirFS(i.charts), dirs...), installer.WithReleaseNames(names...),
		installer.WithTimeout(i.timeout), installer.WithWait(i.wait), installer.WithDebug(i.debug), installer.WithClients(i.clients))
}

// Target is one cluster to install into.
type Target struct {
	installer.Target
	// Primary is the cluster whose control plane this one uses (a remote's
	// primary, or the external control plane); empty or Cluster itself for
	// a cluster that runs its own.
	Primary string
	// Ztunnel is meshctl's proxy as this cluster's ztunnel (WithAmbient).
	Ztunnel *Ztunnel
}

func (t Target) remote() bool { return t.Primary != "" && t.Primary != t.Cluster }

// Order splits targets into install phases by role: first every cluster
// that runs its own control plane, then every remote, each after its
// primary. Uninstalling goes the other way. Order within a phase is kept.
func Order(targets []Target) [][]Target {
	var own, remotes []Target
	for _, t := range targets {
		if t.remote() {
			remotes = append(remotes, t)
		} else {
			own = append(own, t)
		}
	}
	var out [][]Target
	for _, p := range [][]Target{own, remotes} {
		if len(p) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// plain are the targets as the Helm installer takes them: in ambient mode
// the ztunnel and istio-cni charts get values of their own (Ztunnel.values,
// Ztunnel.cniValues).
func (i *Installer) plain(ts []Target) []installer.Target {
	out := make([]installer.Target, len(ts))
	for n, t := range ts {
		out[n] = t.Target
		if i.ambient && t.Ztunnel != nil {
			out[n].ChartValues = map[string]map[string]any{
				ZtunnelChart: t.Ztunnel.values(t.Values),
				CNIChart:     t.Ztunnel.cniValues(t.Values),
			}
		}
	}
	return out
}

// Validate checks the charts directory and every target's values, touching
// no cluster.
func (i *Installer) Validate(targets ...Target) error {
	if i.charts == "" {
		return errors.New("no Istio charts directory (istio.WithCharts; --istio-charts)")
	}
	if err := CheckCharts(i.charts, i.releases()...); err != nil {
		return err
	}
	if i.ambient {
		var errs []error
		for _, t := range targets {
			if err := t.Ztunnel.validate(); err != nil {
				errs = append(errs, fmt.Errorf("cluster %q: %w", t.Cluster, err))
			} else if err := requireAmbient(t.Cluster, t.Values); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return i.helm().Validate(i.plain(targets)...)
}

// Install installs istio-base and istiod into every target: values and
// reachability of every cluster are checked first (the error is about
// them: nothing was touched). Then every remote is prepared for its
// primary (see prepareRemotes), and the phases of Order run one after the
// other, the clusters of a phase in parallel. A remote whose primary failed,
// or that could not be prepared, is skipped. Every cluster's outcome is in
// the result, in target order.
func (i *Installer) Install(ctx context.Context, targets ...Target) (*installer.Result, error) {
	if err := i.Validate(targets...); err != nil {
		return nil, err
	}
	h := i.helm()
	if err := h.Reachable(ctx, i.plain(targets)...); err != nil {
		return nil, err
	}
	prepared, err := i.prepareRemotes(ctx, targets)
	if err != nil {
		return nil, err
	}
	byName := map[string]installer.ClusterResult{}
	for name, c := range prepared {
		if c.Error != "" {
			byName[name] = c
		}
	}
	for _, phase := range Order(targets) {
		var run []Target
		for _, t := range phase {
			if _, failed := byName[t.Cluster]; failed {
				continue // its preparation failed
			}
			if p, done := byName[t.Primary]; t.remote() && done && p.Error != "" {
				byName[t.Cluster] = i.skipped(t, fmt.Sprintf("skipped: its primary %s failed", t.Primary))
				continue
			}
			run = append(run, t)
		}
		if len(run) == 0 {
			continue
		}
		res, err := h.Install(ctx, i.plain(run)...)
		if err != nil {
			return nil, err
		}
		for _, c := range res.Clusters {
			if p, ok := prepared[c.Cluster]; ok && len(c.Releases) > 0 && len(p.Releases) > 0 && c.Releases[0].Action == installer.ActionUnchanged {
				// istio-base went in while preparing: say what was done then.
				c.Releases[0] = p.Releases[0]
			}
			byName[c.Cluster] = c
		}
	}
	return collect(targets, byName), nil
}

// ControlPlaneClustersAnnotation on a remote's Istio namespace names the
// clusters whose istiod manages it: Istio's primary-remote guide sets it,
// and without it the primary's istiod neither patches the remote's
// injection webhook with its CA bundle (the remote's API server then
// refuses istiod's certificate) nor writes istio-ca-root-cert there.
const ControlPlaneClustersAnnotation = "topology.istio.io/controlPlaneClusters"

// prepareRemotes readies every target's Istio namespace (prepareNamespace:
// in ambient mode, each carries its network) and every remote before any
// istiod starts: its Istio namespace names its primary and it holds Istio's CRDs
// (the istio-base release). Both are read by the primary's istiod when it
// adds the remote from its remote secret — which meshctl created before
// any chart — and only then: the annotation decides once whether that
// istiod patches the remote's injection webhook with its CA bundle
// (istio's multicluster.go, checkShouldLead). Istio's primary-remote guide
// gets the same order by creating the remote secret last. The result is
// every remote's istio-base outcome, and the error of every target whose
// namespace could not be prepared; a failed one's other releases are
// skipped.
func (i *Installer) prepareRemotes(ctx context.Context, targets []Target) (map[string]installer.ClusterResult, error) {
	out := map[string]installer.ClusterResult{}
	var remotes []Target
	for _, t := range targets {
		if err := i.prepareNamespace(ctx, t); err != nil {
			out[t.Cluster] = i.skipped(t, err.Error())
			continue
		}
		if t.remote() {
			remotes = append(remotes, t)
		}
	}
	if len(remotes) == 0 {
		return out, nil
	}
	rel := i.releases()
	res, err := i.helmOf(rel[:1]).Install(ctx, i.plain(remotes)...)
	if err != nil {
		return nil, err
	}
	for _, c := range res.Clusters {
		if c.Error != "" { // istio-base's outcome as it is, the rest skipped
			for _, r := range rel[1:] {
				c.Releases = append(c.Releases, installer.ReleaseResult{Name: r.Name, Chart: r.Chart, Action: installer.ActionSkipped})
			}
		}
		out[c.Cluster] = c
	}
	return out, nil
}

// NetworkLabel on the Istio namespace names the cluster's network. In
// ambient mode istiod reads it there (and nowhere else) to give the
// cluster's workloads their network, while ztunnel takes its own from the
// chart's global.network (NETWORK): without the label, istiod sends every
// address on network "" and the proxy, on "network-1", finds no
// destination. Istio's ambient multicluster guide labels it before the
// charts.
const NetworkLabel = "topology.istio.io/network"

// prepareNamespace readies a target's Istio namespace before the charts,
// creating it as Istio's guides do: a remote's names its primary
// (ControlPlaneClustersAnnotation), and in ambient mode each is labeled
// with the cluster's network (NetworkLabel). Other targets need nothing.
func (i *Installer) prepareNamespace(ctx context.Context, t Target) error {
	network := ""
	if g, ok := t.Values["global"].(map[string]any); ok {
		network, _ = g["network"].(string)
	}
	if !t.remote() && (!i.ambient || network == "") {
		return nil
	}
	cs, err := i.clients.File(t.Kubeconfig, "").Kubernetes()
	if err != nil {
		return fmt.Errorf("cluster %s: %w", t.Cluster, err)
	}
	ns := installer.Namespace(t.Values)
	apply := corev1apply.Namespace(ns)
	if t.remote() {
		apply.WithAnnotations(map[string]string{ControlPlaneClustersAnnotation: t.Primary})
	}
	if i.ambient && network != "" {
		apply.WithLabels(map[string]string{NetworkLabel: network})
	}
	// A field manager of its own: an apply under the gateway step's
	// manager would drop the labels that step set.
	if _, err := cs.CoreV1().Namespaces().Apply(ctx, apply, metav1.ApplyOptions{FieldManager: "meshctl-istio", Force: true}); err != nil {
		return fmt.Errorf("cluster %s: preparing namespace %s (primary %q, network %q): %w", t.Cluster, ns, t.Primary, network, err)
	}
	return nil
}

func (i *Installer) skipped(t Target, why string) installer.ClusterResult {
	c := installer.ClusterResult{Cluster: t.Cluster, Namespace: installer.Namespace(t.Values), Error: why}
	for _, r := range i.releases() {
		c.Releases = append(c.Releases, installer.ReleaseResult{Name: r.Name, Chart: r.Chart, Action: installer.ActionSkipped})
	}
	return c
}

func collect(targets []Target, byName map[string]installer.ClusterResult) *installer.Result {
	res := &installer.Result{Clusters: make([]installer.ClusterResult, len(targets))}
	for n, t := range targets {
		res.Clusters[n] = byName[t.Cluster]
	}
	return res
}

// Uninstall removes every release of AmbientReleases from every target, in
// reverse order (ztunnel, istio-cni, istiod, istio-base), remotes first,
// then the clusters that run their own control plane: an uninstall need
// not know the mode of the install. It needs no charts: releases are
// removed by name. A release not installed is reported so.
func (i *Installer) Uninstall(ctx context.Context, targets ...Target) (*installer.Result, error) {
	h := i.helmOf(AmbientReleases)
	if err := h.Reachable(ctx, i.plain(targets)...); err != nil {
		return nil, err
	}
	phases := Order(targets)
	byName := map[string]installer.ClusterResult{}
	for n := len(phases) - 1; n >= 0; n-- {
		res, err := h.Uninstall(ctx, i.plain(phases[n])...)
		if err != nil {
			return nil, err
		}
		for _, c := range res.Clusters {
			byName[c.Cluster] = c
		}
	}
	return collect(targets, byName), nil
}
