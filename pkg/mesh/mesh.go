// Package mesh brings a whole environment up the way `meshctl up` does, as a
// library: the clusters (pkg/cluster), then routes between clusters on one
// network and east-west gateways between networks (pkg/connect), Istio
// remote secrets, each cluster's intermediate of a shared root CA (cacerts),
// and meshctl's CNI and HBONE dataplane (Helm charts, image side-loaded or
// pushed). The meshctl CLI and the Ginkgo framework pkg/meshtest both run
// it, so a suite gets exactly the environment a developer gets at the
// terminal.
//
// Each step is one status line on the logger. A failed step ends the run
// with a *StepError that names the step, after everything before it was
// done: reruns are idempotent, so the fix is to rerun.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/connect"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/connect/remotesecret"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/install/installer"
	"github.com/meshctl/meshctl/pkg/install/meshca"
	"github.com/meshctl/meshctl/pkg/install/values"
)

// Provider is what a Builder needs of pkg/cluster's *cluster.Provider (which
// is one): creating clusters, reading an environment, and running commands
// on kind nodes. Tests substitute it.
type Provider interface {
	Up(ctx context.Context, plan *cluster.Plan, opts ...cluster.UpOption) (*cluster.UpResult, error)
	Environment(ctx context.Context, env string) ([]cluster.ClusterPlan, error)
	ClusterKubeconfig(ctx context.Context, c cluster.ClusterPlan, internal bool) ([]byte, error)
	KubeconfigPath(env, name string, internal bool) string
	Status(ctx context.Context, env, registry string) (*cluster.StatusResult, error)
	Exec(ctx context.Context, kindName, node string, stdin []byte, argv ...string) error
	List(ctx context.Context) ([]cluster.Existing, error)
	SetPools(ctx context.Context, kindName string, pools *cluster.Pools) error
}

// Steps of Up, as StepError names them.
const (
	StepClusters      = "clusters"
	StepConnect       = "connect"
	StepGateways      = "gateways"
	StepRemoteSecrets = "remote-secrets"
	StepCacerts       = "cacerts"
	StepInstall       = "install"
)

// StepError is a step of Up or Connect that failed after the steps before
// it succeeded.
type StepError struct {
	Env  string
	Step string
	Err  error
}

func (e *StepError) Error() string {
	if e.Step == StepClusters {
		return fmt.Sprintf("creating environment %q: %v", e.Env, e.Err)
	}
	return fmt.Sprintf("environment %q is up, but step %q failed: %v", e.Env, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// Builder runs the steps. Its zero-value steps are all on; options turn them
// off or configure them.
type Builder struct {
	p Provider
	o options

	imgOnce sync.Once // dataplaneImage
	img     *image.Image
	imgID   string
	imgErr  error
}

type options struct {
	logger         log.Logger
	upOpts         []cluster.UpOption
	connect        bool
	remoteSecrets  bool
	cacerts        bool
	install        bool
	artifacts      string
	gatewayOpts    []gateway.Option
	valuesOpts     []values.Option
	gatewayAddrs   map[string][]string // network -> addresses the user gave
	imageOpts      []image.Option
	pushRegistry   string
	installTimeout time.Duration
	istio          *istioOptions
}

// Option configures a Builder.
type Option func(*options)

// WithLogger sets where the status lines go (default: nowhere).
func WithLogger(l log.Logger) Option { return func(o *options) { o.logger = l } }

// WithUpOptions passes options to cluster creation (wait, retain, recreate).
func WithUpOptions(opts ...cluster.UpOption) Option {
	return func(o *options) { o.upOpts = append(o.upOpts, opts...) }
}

// WithConnect turns routes and gateways on or off (default on).
func WithConnect(b bool) Option { return func(o *options) { o.connect = b } }

// WithRemoteSecrets turns Istio remote secrets on or off (default on).
func WithRemoteSecrets(b bool) Option { return func(o *options) { o.remoteSecrets = b } }

// WithCacerts turns the shared root CA's istio-system/cacerts on or off
// (default on).
func WithCacerts(b bool) Option { return func(o *options) { o.cacerts = b } }

// WithInstall turns the dataplane install on or off (default on).
func WithInstall(b bool) Option { return func(o *options) { o.install = b } }

// WithArtifacts is the directory of the environment's CA files (as
// meshca.Dir lays them out); required for the cacerts step.
func WithArtifacts(dir string) Option { return func(o *options) { o.artifacts = dir } }

// WithGatewayOptions configures MetalLB and the east-west gateways.
func WithGatewayOptions(opts ...gateway.Option) Option {
	return func(o *options) { o.gatewayOpts = append(o.gatewayOpts, opts...) }
}

// WithValues configures the Helm values of the install (profile, files,
// --set, mesh ID).
func WithValues(opts ...values.Option) Option {
	return func(o *options) { o.valuesOpts = append(o.valuesOpts, opts...) }
}

// WithGatewayAddress gives a network's east-west gateway address; a network
// given this way is not overridden by the address connect discovers.
func WithGatewayAddress(network, addr string) Option {
	return func(o *options) { o.gatewayAddrs[network] = append(o.gatewayAddrs[network], addr) }
}

// WithImage configures the dataplane image (binary, repository, tag).
func WithImage(opts ...image.Option) Option {
	return func(o *options) { o.imageOpts = append(o.imageOpts, opts...) }
}

// WithImageRegistry pushes the dataplane image to this registry (host[:port]
// with an optional path, e.g. localhost:5001 or ghcr.io/me) and has every
// cluster run it from there. Existing clusters need it: their nodes are not
// containers on this machine and cannot be side-loaded. Kind clusters are
// still side-loaded under the pushed name, so they never pull.
func WithImageRegistry(registry string) Option { return func(o *options) { o.pushRegistry = registry } }

// WithInstallTimeout bounds each chart's install or upgrade.
func WithInstallTimeout(d time.Duration) Option { return func(o *options) { o.installTimeout = d } }

// New returns a Builder working through p.
func New(p Provider, opts ...Option) *Builder {
	o := options{
		logger: log.NoopLogger{}, connect: true, remoteSecrets: true, cacerts: true, install: true,
		gatewayAddrs: map[string][]string{}, installTimeout: installer.DefaultTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return &Builder{p: p, o: o}
}

// Result is what Up did, step by step; a step that did not run is empty.
type Result struct {
	*cluster.UpResult
	// Routes are the same-network routes connect put on each node.
	Routes *connect.Result `json:"routes,omitempty"`
	// Gateways: in a multi-network environment, each cluster's east-west
	// gateway.
	Gateways      []gateway.ClusterResult `json:"gateways"`
	RemoteSecrets *remotesecret.Result    `json:"remoteSecrets,omitempty"`
	Install       *InstallReport          `json:"install,omitempty"`
}

// Up creates (or reuses) the plan's clusters and runs every enabled step.
// The result holds what was done even when a step fails.
func (b *Builder) Up(ctx context.Context, plan *cluster.Plan) (*Result, error) {
	if b.o.cacerts && b.o.artifacts == "" {
		return nil, errors.New("mesh: the cacerts step needs WithArtifacts (where the CA files live)")
	}
	if b.o.install || b.o.istio != nil {
		// Bad values or an image no cluster could get fail here, before
		// any cluster is created.
		if err := b.ValidateInstall(plan); err != nil {
			return nil, err
		}
	}
	ctx, unlock, err := b.lock(ctx, plan.Env, "up")
	if err != nil {
		return nil, err
	}
	defer unlock()
	up, err := b.p.Up(ctx, plan, b.o.upOpts...)
	if err != nil {
		return nil, &StepError{Env: plan.Env, Step: StepClusters, Err: err}
	}
	res := &Result{UpResult: up, Gateways: []gateway.ClusterResult{}}
	if b.o.connect {
		conn, err := b.Connect(ctx, plan.Env)
		if conn != nil {
			res.Routes, res.Gateways, res.RemoteSecrets = conn.Routes, conn.Gateways, conn.RemoteSecrets
		}
		if err != nil {
			return res, err
		}
	}
	if b.o.cacerts {
		if err := b.step("Installing the shared root CA (istio-system/cacerts)", func() error {
			return b.installCacerts(ctx, up)
		}); err != nil {
			return res, &StepError{Env: plan.Env, Step: StepCacerts, Err: err}
		}
	}
	if b.o.install || b.o.istio != nil {
		res.Install, err = b.Install(ctx, plan, res.Gateways...)
		if err != nil {
			return res, &StepError{Env: plan.Env, Step: StepInstall, Err: err}
		}
	}
	return res, nil
}

// ConnectResult is what Connect did.
type ConnectResult struct {
	Routes        *connect.Result         `json:"routes"`
	Gateways      []gateway.ClusterResult `json:"gateways"`
	RemoteSecrets *remotesecret.Result    `json:"remoteSecrets,omitempty"`
}

// Connect routes the clusters of each network to each other, gives the
// clusters of a multi-network environment MetalLB and east-west gateways,
// and installs the remote secrets (unless WithRemoteSecrets(false)).
func (b *Builder) Connect(ctx context.Context, env string) (*ConnectResult, error) {
	ctx, unlock, err := b.lock(ctx, env, "connect")
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := &ConnectResult{Gateways: []gateway.ClusterResult{}}
	err = b.step("Connecting clusters on the same network", func() error {
		var err error
		out.Routes, err = connect.New(b.p, b.p, connect.WithLogger(b.o.logger)).Connect(ctx, env)
		return err
	})
	if err != nil {
		return out, &StepError{Env: env, Step: StepConnect, Err: err}
	}
	gws, err := b.gateways(ctx, env)
	if err != nil {
		return out, &StepError{Env: env, Step: StepGateways, Err: err}
	}
	out.Gateways = gws
	if b.o.remoteSecrets {
		err := b.step("Installing remote secrets (control planes read the other clusters)", func() error {
			var err error
			out.RemoteSecrets, err = remotesecret.New(b.p, remotesecret.WithLogger(b.o.logger), remotesecret.WithServerByName(true)).Ensure(ctx, env)
			return err
		})
		if err != nil {
			return out, &StepError{Env: env, Step: StepRemoteSecrets, Err: err}
		}
	}
	return out, nil
}

// Locker takes an environment's lock (*cluster.Provider is one): every
// method of a Builder that changes an environment holds it throughout, so
// that a second meshctl on the same environment is refused instead of
// undoing the first one's work. A Provider that is not a Locker (a test's)
// is not locked.
type Locker interface {
	LockEnv(ctx context.Context, env, verb string) (context.Context, func(), error)
}

func (b *Builder) lock(ctx context.Context, env, verb string) (context.Context, func(), error) {
	l, ok := b.p.(Locker)
	if !ok {
		return ctx, func() {}, nil
	}
	return l.LockEnv(ctx, env, verb)
}

// gateways gives each cluster of a multi-network environment MetalLB and an
// east-west gateway Service, and each primary of remotes (on any network)
// the Service its remotes reach its istiod through; otherwise it does
// nothing and says nothing.
func (b *Builder) gateways(ctx context.Context, env string) ([]gateway.ClusterResult, error) {
	plans, err := b.p.Environment(ctx, env)
	if err != nil {
		return nil, err
	}
	networks := map[string]bool{}
	for _, c := range plans {
		networks[c.Network] = true
	}
	primaries := gateway.PrimariesOfRemotes(plans)
	var title string
	switch {
	case len(networks) > 1:
		title = fmt.Sprintf("Installing MetalLB and east-west gateways (%d networks)", len(networks))
	case len(primaries) > 0:
		title = fmt.Sprintf("Installing MetalLB and istiod's address for remotes (%d primaries)", len(primaries))
	default:
		return []gateway.ClusterResult{}, nil
	}
	var res *gateway.Result
	err = b.step(title, func() error {
		opts := append([]gateway.Option{gateway.WithLogger(b.o.logger)}, b.o.gatewayOpts...)
		res, err = gateway.New(b.p, opts...).Install(ctx, env)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, c := range res.Clusters {
		if len(c.Addresses) > 0 {
			b.o.logger.V(0).Infof(" • %s (%s): east-west gateway %s", c.Cluster, c.Network, strings.Join(c.Addresses, ", "))
		}
		if len(c.IstiodAddresses) > 0 {
			b.o.logger.V(0).Infof(" • %s: istiod for remotes at %s", c.Cluster, strings.Join(c.IstiodAddresses, ", "))
		}
	}
	return res.Clusters, nil
}

// installCacerts gives every cluster its intermediate of the environment's
// shared root CA: the files are created or reused as `meshctl ca` does, then
// installed concurrently.
func (b *Builder) installCacerts(ctx context.Context, up *cluster.UpResult) error {
	kubeconfigs := make(map[string]string, len(up.Clusters))
	for _, c := range up.Clusters {
		kubeconfigs[c.Name] = c.Kubeconfig
	}
	return meshca.New(meshca.Dir(b.o.artifacts, up.Env), meshca.WithName(up.Env)).Install(ctx, kubeconfigs)
}

// step runs f as one status line.
func (b *Builder) step(title string, f func() error) error {
	status := cli.NewStatus(b.o.logger)
	status.Start(title)
	err := f()
	status.End(err == nil)
	return err
}
