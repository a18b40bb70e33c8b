package meshtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"

	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/internal/fsutil"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// provider is the part of cluster.Provider an Env uses: what pkg/mesh's
// verbs (the library behind `meshctl up` and `meshctl down`) need. Unit
// tests replace it.
type provider = mesh.Provider

// Env is a multi-cluster environment a suite runs against: made by Setup
// (or SynchronizedSetup), shared by every spec and every parallel process.
type Env struct {
	desc     description
	clusters []*Cluster
	prov     provider
	logger   log.Logger
	// meshOpts are the suite's own options of pkg/mesh, for the teardown.
	meshOpts []mesh.Option
}

// description is what process 1 hands to the other parallel processes:
// small, and without secrets — kubeconfigs travel as paths of 0600 files.
type description struct {
	Env       string        `json:"env"`
	Artifacts string        `json:"artifacts"`
	EchoImage string        `json:"echoImage"`
	Registry  string        `json:"registry,omitempty"`
	Clusters  []clusterDesc `json:"clusters"`
	// Owned: this run created every cluster, so its teardown deletes them.
	Owned bool `json:"owned"`
	// RegistryCreated: this run started the registry, so teardown removes it.
	RegistryCreated bool `json:"registryCreated,omitempty"`
	Keep            bool `json:"keep,omitempty"`
}

type clusterDesc struct {
	Name               string   `json:"name"`
	KindName           string   `json:"kindName"`
	Network            string   `json:"network"`
	Roles              []string `json:"roles"`
	PrimaryClusterName string   `json:"primaryClusterName"`
	ConfigClusterName  string   `json:"configClusterName"`
	Kubeconfig         string   `json:"kubeconfig"`
}

// Option sets what a suite needs from its environment. Flags and MESHTEST_*
// variables override options: the suite states its defaults, the command
// line or CI job has the last word.
type Option func(*options)

type options struct {
	cfg      config
	mesh     []mesh.Option
	prov     provider
	logger   log.Logger
	flags    flagSet
	getenv   func(string) string
	isolated bool // tests: ignore flags and the process environment
}

// WithTopology makes the environment from a topology file.
func WithTopology(path string) Option { return func(o *options) { o.cfg.Topology = path } }

// WithClusters asks for n clusters named cluster1..n (without a topology).
func WithClusters(n int) Option { return func(o *options) { o.cfg.Clusters = n } }

// WithNetworks spreads the clusters over n networks (without a topology).
func WithNetworks(n int) Option { return func(o *options) { o.cfg.Networks = n } }

// WithEnv names the meshctl environment (the kind clusters' prefix).
func WithEnv(name string) Option { return func(o *options) { o.cfg.Env = name } }

// WithImage sets the kind node image of created clusters.
func WithImage(image string) Option { return func(o *options) { o.cfg.Image = image } }

// WithArtifacts sets the directory for kubeconfigs, CA files and failure
// artifacts (default _artifacts, relative to the test's directory).
func WithArtifacts(dir string) Option { return func(o *options) { o.cfg.Artifacts = dir } }

// WithReuse uses the environment `meshctl up` already made.
func WithReuse(b bool) Option { return func(o *options) { o.cfg.Reuse = b } }

// WithKeep keeps the clusters this run creates.
func WithKeep(b bool) Option { return func(o *options) { o.cfg.Keep = b } }

// WithRegistry runs a local registry as `meshctl up` does (off by default:
// a suite's images are usually side-loaded).
func WithRegistry(r model.Registry) Option { return func(o *options) { o.cfg.Registry = r } }

// WithEchoImage sets the image DeployEcho runs.
func WithEchoImage(image string) Option { return func(o *options) { o.cfg.EchoImage = image } }

// WithWait bounds the wait for each created control plane to be Ready.
func WithWait(d time.Duration) Option { return func(o *options) { o.cfg.Wait = d } }

// WithInstall installs meshctl's CNI and HBONE dataplane as `meshctl up`
// does, with the dataplane image built from binary: a static Linux meshctl
// (CGO_ENABLED=0; a test binary cannot be it). An empty binary means the
// meshctl found on PATH.
func WithInstall(binary string) Option {
	return func(o *options) { o.cfg.Install, o.cfg.DataplaneBinary = true, binary }
}

// WithImageRegistry pushes the dataplane image to this registry, for
// topologies with existing clusters (see meshctl install --image-registry).
func WithImageRegistry(registry string) Option {
	return func(o *options) { o.cfg.ImageRegistry = registry }
}

// WithRemoteSecrets turns Istio remote secrets on or off (default on, as
// `meshctl up`).
func WithRemoteSecrets(b bool) Option { return func(o *options) { o.cfg.RemoteSecrets = b } }

// WithMeshOptions passes options to pkg/mesh, the library that makes the
// environment: Helm values (mesh.WithValues), MetalLB images
// (mesh.WithGatewayOptions), install timeout, and so on.
func WithMeshOptions(opts ...mesh.Option) Option {
	return func(o *options) { o.mesh = append(o.mesh, opts...) }
}

// WithLogger sets where progress goes (default: GinkgoWriter, shown for a
// failed setup or with -v).
func WithLogger(l log.Logger) Option { return func(o *options) { o.logger = l } }

func newOptions(opts []Option) options {
	o := options{cfg: defaultConfig(), flags: commandLine, getenv: os.Getenv}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// settings resolves the configuration: options, then MESHTEST_*, then flags.
func (o options) settings() (config, error) {
	if o.isolated {
		return o.cfg, nil
	}
	return o.flags.resolve(o.cfg, o.getenv)
}

// create makes or reuses the environment and returns its description. It
// validates everything it can before touching anything, and every failure is
// one error that says what to do.
func create(ctx context.Context, o options) (description, error) {
	cfg, err := o.settings()
	if err != nil {
		return description{}, err
	}
	artifacts, err := filepath.Abs(cfg.Artifacts)
	if err != nil {
		return description{}, fmt.Errorf("meshtest: artifacts directory %q: %w", cfg.Artifacts, err)
	}
	cfg.Artifacts = artifacts
	req, err := cfg.request()
	if err != nil {
		return description{}, fmt.Errorf("meshtest: %w", err)
	}
	if cfg.Reuse && req.Clusters == 0 && len(req.Specs) == 0 {
		// Reuse without a stated topology takes the environment as it is.
		return reuse(ctx, o.prov, cfg, nil)
	}
	plan, err := model.NewPlan(req)
	if err != nil {
		return description{}, fmt.Errorf("meshtest: the topology cannot be satisfied: %w", err)
	}
	if cfg.Reuse {
		return reuse(ctx, o.prov, cfg, plan)
	}
	return up(ctx, o.prov, o.log(), cfg, plan, o.mesh)
}

// up is `meshctl up` through its verb, mesh.Up: the clusters (created
// in parallel or reused as planned), routes between clusters on one network
// and east-west gateways between networks, remote secrets, each cluster's
// intermediate of a shared root CA, and with WithInstall the dataplane.
func up(ctx context.Context, p provider, logger log.Logger, cfg config, plan *model.Plan, extra []mesh.Option) (description, error) {
	opts := []mesh.Option{
		mesh.WithLogger(logger), mesh.WithArtifacts(cfg.Artifacts),
		mesh.WithUpOptions(cluster.UpWithWait(cfg.Wait)),
		mesh.WithRemoteSecrets(cfg.RemoteSecrets), mesh.WithInstall(cfg.Install),
	}
	if cfg.Install {
		bin := cfg.DataplaneBinary
		if bin == "" {
			var err error
			if bin, err = exec.LookPath("meshctl"); err != nil {
				return description{}, fmt.Errorf("meshtest: installing the dataplane needs a static meshctl binary to build its image from: give -meshtest.dataplane-binary (or meshtest.WithInstall(path)), or put meshctl on PATH (%w)", err)
			}
		}
		opts = append(opts, mesh.WithImage(image.WithBinary(bin)))
	}
	if cfg.ImageRegistry != "" {
		opts = append(opts, mesh.WithImageRegistry(cfg.ImageRegistry))
	}
	res, err := mesh.NewUp(mesh.NewConfig(p, append(opts, extra...)...)).Run(ctx, plan)
	if res == nil {
		return description{}, fmt.Errorf("meshtest: %w", err)
	}
	d := description{Env: plan.Env, Artifacts: cfg.Artifacts, EchoImage: cfg.EchoImage, Keep: cfg.Keep, Owned: true}
	if res.Registry != nil {
		d.Registry = res.Registry.Name
		d.RegistryCreated = res.Registry.Action == cluster.ActionCreated
	}
	for _, r := range res.Clusters {
		// Clusters that existed already are someone else's: not deleted.
		d.Owned = d.Owned && r.Action != cluster.ActionReused
		c, _ := plan.Cluster(r.Name)
		d.Clusters = append(d.Clusters, descFor(c, r.Kubeconfig))
	}
	if err != nil {
		return d, fmt.Errorf("meshtest: %w", err)
	}
	if res.Install != nil {
		if err := res.Install.Err(); err != nil {
			return d, fmt.Errorf("meshtest: environment %q is up, but the dataplane's %w", plan.Env, err)
		}
	}
	return d, nil
}

// reuse takes the environment `meshctl up` made, as its cluster records
// describe it, after checking it against plan (nil: take it as it is). The
// kubeconfigs are read from the clusters themselves and written under this
// run's artifacts directory, so the suite works whatever --artifacts
// `meshctl up` had.
func reuse(ctx context.Context, p provider, cfg config, plan *model.Plan) (description, error) {
	env := cfg.Env
	if env == "" {
		env = model.DefaultEnv
	}
	cs, err := p.Environment(ctx, env)
	if err != nil {
		return description{}, fmt.Errorf("meshtest: reading environment %q to reuse: %w", env, err)
	}
	have := model.Plans(cs)
	if err := match(env, plan, have); err != nil {
		return description{}, err
	}
	d := description{Env: env, Artifacts: cfg.Artifacts, EchoImage: cfg.EchoImage, Keep: true}
	for _, c := range have {
		kc, err := p.ClusterKubeconfig(ctx, c, false)
		if err != nil {
			return description{}, fmt.Errorf("meshtest: environment %q: %w", env, err)
		}
		path := filepath.Join(cfg.Artifacts, env, c.Name, "kubeconfig")
		if err := writePrivate(path, kc); err != nil {
			return description{}, fmt.Errorf("meshtest: cluster %q: %w", c.Name, err)
		}
		d.Clusters = append(d.Clusters, descFor(c, path))
	}
	return d, nil
}

// match says, in one message, every way an existing environment differs from
// the topology a suite wants: cluster count and names, networks, and who is
// primary or config for whom. Subnets and images are not compared: the
// existing clusters' own are the truth the suite then works with.
func match(env string, plan *model.Plan, have []model.ClusterPlan) error {
	fix := fmt.Sprintf("create it with `meshctl up --env %s` and the same topology, or run without -meshtest.reuse", env)
	if len(have) == 0 {
		return fmt.Errorf("meshtest: -meshtest.reuse: environment %q has no clusters on this machine; %s", env, fix)
	}
	if plan == nil {
		return nil
	}
	byName := map[string]model.ClusterPlan{}
	for _, c := range have {
		byName[c.Name] = c
	}
	var diffs []string
	if len(have) != len(plan.Clusters) {
		diffs = append(diffs, fmt.Sprintf("it has %d cluster(s) (%s), the topology wants %d (%s)",
			len(have), names(have), len(plan.Clusters), names(plan.Clusters)))
	}
	wanted := map[string]bool{}
	for _, w := range plan.Clusters {
		wanted[w.Name] = true
		h, ok := byName[w.Name]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("cluster %q: missing", w.Name))
			continue
		}
		if h.Network != w.Network {
			diffs = append(diffs, fmt.Sprintf("cluster %q: network %q, the topology wants %q", w.Name, h.Network, w.Network))
		}
		if h.PrimaryClusterName != w.PrimaryClusterName {
			diffs = append(diffs, fmt.Sprintf("cluster %q: primary cluster %q, the topology wants %q", w.Name, h.PrimaryClusterName, w.PrimaryClusterName))
		}
		if h.ConfigClusterName != w.ConfigClusterName {
			diffs = append(diffs, fmt.Sprintf("cluster %q: config cluster %q, the topology wants %q", w.Name, h.ConfigClusterName, w.ConfigClusterName))
		}
	}
	for _, h := range have {
		if !wanted[h.Name] {
			diffs = append(diffs, fmt.Sprintf("cluster %q: not in the topology", h.Name))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("meshtest: -meshtest.reuse: environment %q does not match the topology (%s):\n  %s",
		env, fix, strings.Join(diffs, "\n  "))
}

func names(cs []model.ClusterPlan) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func descFor(c model.ClusterPlan, kubeconfig string) clusterDesc {
	return clusterDesc{
		Name: c.Name, KindName: c.KindName, Network: c.Network, Roles: c.Roles,
		PrimaryClusterName: c.PrimaryClusterName, ConfigClusterName: c.ConfigClusterName,
		Kubeconfig: kubeconfig,
	}
}

// load builds the clients of a described environment: what every process
// does. meshOpts are the suite's options of pkg/mesh, which the teardown
// uses too.
func load(d description, p provider, logger log.Logger, meshOpts ...mesh.Option) (*Env, error) {
	e := &Env{desc: d, prov: p, logger: logger, meshOpts: meshOpts}
	e.clusters = make([]*Cluster, len(d.Clusters))
	err := parallel.ForEach(indexes(len(d.Clusters)), func(i int) error {
		c, err := newCluster(d.Clusters[i])
		if err != nil {
			return err
		}
		c.env = e
		e.clusters[i] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meshtest: environment %q: %w", d.Env, err)
	}
	return e, nil
}

// teardown deletes what this run created, unless kept, as `meshctl down`
// does (mesh.Down): meshctl's Helm releases are removed from existing
// clusters before their labelled objects go. Reused environments are never
// deleted: they belong to whoever ran `meshctl up`.
func (e *Env) teardown(ctx context.Context) error {
	d := e.desc
	switch {
	case !d.Owned:
		e.logger.V(0).Infof("meshtest: environment %q was not created by this run: left in place", d.Env)
		return nil
	case d.Keep:
		e.logger.V(0).Infof("meshtest: environment %q kept: rerun with -meshtest.reuse -meshtest.env=%s, delete with `meshctl down --env %s`", d.Env, d.Env, d.Env)
		return nil
	}
	opts := append([]mesh.Option{mesh.WithLogger(e.logger), mesh.WithArtifacts(d.Artifacts)}, e.meshOpts...)
	down := mesh.NewDown(mesh.NewConfig(e.prov, opts...))
	if d.RegistryCreated {
		down.Registry = d.Registry
	}
	if _, err := down.Run(ctx, d.Env); err != nil {
		return fmt.Errorf("meshtest: deleting environment %q (delete it with `meshctl down --env %s`): %w", d.Env, d.Env, err)
	}
	return nil
}

func (d description) marshal() []byte {
	b, _ := json.Marshal(d) // strings, bools and slices of them: cannot fail
	return b
}

func unmarshal(data []byte) (description, error) {
	var d description
	if err := json.Unmarshal(data, &d); err != nil {
		return d, fmt.Errorf("meshtest: reading the environment process 1 made: %w", err)
	}
	if d.Env == "" || len(d.Clusters) == 0 {
		return d, fmt.Errorf("meshtest: process 1 described no environment (%q)", data)
	}
	return d, nil
}

// Name is the meshctl environment's name.
func (e *Env) Name() string { return e.desc.Env }

// Artifacts is the artifacts directory (absolute).
func (e *Env) Artifacts() string { return e.desc.Artifacts }

// writePrivate writes a kubeconfig: 0600 in a 0700 directory, atomically.
func writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	return fsutil.WriteFile(path, data, 0o600)
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
