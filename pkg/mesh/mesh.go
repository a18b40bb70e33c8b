// Package mesh is meshctl's orchestration layer: the verbs that change or
// read a whole environment — Up, Connect, Install, Uninstall, Down, Status —
// one type each, over one shared Config (as helm's pkg/action does over its
// Configuration). Up brings an environment up the way `meshctl up` does: the
// clusters (pkg/cluster), then routes between clusters on one network and
// east-west gateways between networks (pkg/connect/...), Istio remote secrets,
// each cluster's intermediate of a shared root CA (cacerts), and meshctl's
// CNI and HBONE dataplane (Helm charts, image side-loaded or pushed). Down
// removes meshctl's Helm releases from the clusters it keeps, then deletes
// (or cleans) the clusters. The meshctl CLI and the Ginkgo framework
// pkg/meshtest both run these verbs, so a suite gets exactly the
// environment a developer gets at the terminal, and tears it down the same
// way.
//
//	cfg := mesh.NewConfig(cluster.NewProvider(), mesh.WithArtifacts(dir))
//	res, err := mesh.NewUp(cfg).Run(ctx, plan)
//	...
//	_, err = mesh.NewDown(cfg).Run(ctx, plan.Env)
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
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/connect/remotesecret"
	"github.com/meshctl/meshctl/pkg/connect/routes"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/install/installer"
	"github.com/meshctl/meshctl/pkg/install/values"
	"github.com/meshctl/meshctl/pkg/kubeclient"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// Provider is what the verbs need of pkg/cluster's *cluster.Provider (which
// is one): creating and deleting clusters, reading an environment, and
// running commands on kind nodes. Tests substitute it.
type Provider interface {
	Up(ctx context.Context, plan *model.Plan, opts ...cluster.UpOption) (*cluster.UpResult, error)
	Down(ctx context.Context, env string, opts ...cluster.DownOption) (*cluster.DownResult, error)
	Environment(ctx context.Context, env string) ([]model.ClusterState, error)
	ClusterKubeconfig(ctx context.Context, c model.ClusterPlan, internal bool) ([]byte, error)
	KubeconfigPath(env, name string, internal bool) string
	Status(ctx context.Context, env, registry string) (*cluster.StatusResult, error)
	Exec(ctx context.Context, kindName, node string, stdin []byte, argv ...string) error
	List(ctx context.Context) ([]cluster.Listed, error)
	SetPools(ctx context.Context, kindName string, pools *model.Pools) error
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

// Config is what every verb shares: the provider of clusters, the logger
// the status lines go to, the artifacts directory, the kube-client factory,
// and the settings of the steps (all on by default; options turn them off or
// configure them). Make it with NewConfig; one Config serves any number of
// verbs, one after another or at once.
type Config struct {
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
	istioAmbient   bool
	clients        *kubeclient.Factory
}

// Option configures a Config.
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

// WithClients shares a kube-client factory (default: a new one per Config,
// with kubeclient.WithCommandRateLimit), so that every step reaches each
// cluster through the same clients.
func WithClients(f *kubeclient.Factory) Option { return func(o *options) { o.clients = f } }

// NewConfig returns the Config of verbs working through p.
func NewConfig(p Provider, opts ...Option) *Config {
	o := options{
		logger: log.NoopLogger{}, connect: true, remoteSecrets: true, cacerts: true, install: true,
		gatewayAddrs: map[string][]string{}, installTimeout: installer.DefaultTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.clients == nil {
		o.clients = kubeclient.NewFactory(kubeclient.WithCommandRateLimit())
	}
	return &Config{p: p, o: o}
}

// Provider is the provider the verbs work through.
func (m *Config) Provider() Provider { return m.p }

// Logger is where the verbs' status lines go.
func (m *Config) Logger() log.Logger { return m.o.logger }

// Clients is the kube-client factory the verbs share.
func (m *Config) Clients() *kubeclient.Factory { return m.o.clients }

// Result is what Up did, step by step; a step that did not run is empty.
type Result struct {
	*cluster.UpResult
	// Routes are the same-network routes connect put on each node.
	Routes *routes.Result `json:"routes,omitempty"`
	// Gateways: in a multi-network environment, each cluster's east-west
	// gateway.
	Gateways      []gateway.ClusterResult `json:"gateways"`
	RemoteSecrets *remotesecret.Result    `json:"remoteSecrets,omitempty"`
	Install       *InstallReport          `json:"install,omitempty"`
}

// up creates (or reuses) the plan's clusters and runs every enabled step.
// The result holds what was done even when a step fails.
func (m *Config) up(ctx context.Context, plan *model.Plan) (*Result, error) {
	if m.o.cacerts && m.o.artifacts == "" {
		return nil, errors.New("mesh: the cacerts step needs WithArtifacts (where the CA files live)")
	}
	if m.o.install || m.o.istio != nil {
		// Bad values or an image no cluster could get fail here, before
		// any cluster is created.
		if err := m.validateInstall(plan); err != nil {
			return nil, err
		}
	}
	ctx, unlock, err := m.lock(ctx, plan.Env, "up")
	if err != nil {
		return nil, err
	}
	defer unlock()
	up, err := m.p.Up(ctx, plan, m.o.upOpts...)
	if err != nil {
		return nil, &StepError{Env: plan.Env, Step: StepClusters, Err: err}
	}
	res := &Result{UpResult: up, Gateways: []gateway.ClusterResult{}}
	if m.o.connect {
		conn, err := m.connect(ctx, plan.Env)
		if conn != nil {
			res.Routes, res.Gateways, res.RemoteSecrets = conn.Routes, conn.Gateways, conn.RemoteSecrets
		}
		if err != nil {
			return res, err
		}
	}
	if m.o.cacerts {
		if err := m.step("Installing the shared root CA (istio-system/cacerts)", func() error {
			return m.installCacerts(ctx, up)
		}); err != nil {
			return res, &StepError{Env: plan.Env, Step: StepCacerts, Err: err}
		}
	}
	if m.o.install || m.o.istio != nil {
		res.Install, err = m.install(ctx, plan, res.Gateways...)
		if err != nil {
			return res, &StepError{Env: plan.Env, Step: StepInstall, Err: err}
		}
	}
	// New clusters' kube-system pods (CoreDNS) turned ready during the
	// steps above, mostly: up ends when status would call them Ready.
	if w, ok := m.p.(SystemWaiter); ok {
		if err := w.WaitSystem(ctx, plan, up, m.o.upOpts...); err != nil {
			return res, &StepError{Env: plan.Env, Step: StepClusters, Err: err}
		}
	}
	return res, nil
}

// SystemWaiter waits for the kube-system workloads of the clusters an Up
// created (*cluster.Provider is one); up calls it last. A Provider that is
// not one (a test's) is not waited for.
type SystemWaiter interface {
	WaitSystem(ctx context.Context, plan *model.Plan, res *cluster.UpResult, opts ...cluster.UpOption) error
}

// ConnectResult is what Connect did.
type ConnectResult struct {
	Routes        *routes.Result          `json:"routes"`
	Gateways      []gateway.ClusterResult `json:"gateways"`
	RemoteSecrets *remotesecret.Result    `json:"remoteSecrets,omitempty"`
}

// connect routes the clusters of each network to each other, gives the
// clusters of a multi-network environment MetalLB and east-west gateways,
// and installs the remote secrets (unless WithRemoteSecrets(false)).
func (m *Config) connect(ctx context.Context, env string) (*ConnectResult, error) {
	ctx, unlock, err := m.lock(ctx, env, "connect")
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := &ConnectResult{Gateways: []gateway.ClusterResult{}}
	err = m.step("Connecting clusters on the same network", func() error {
		var err error
		out.Routes, err = routes.New(m.p, m.p, routes.WithLogger(m.o.logger)).Connect(ctx, env)
		return err
	})
	if err != nil {
		return out, &StepError{Env: env, Step: StepConnect, Err: err}
	}
	gws, err := m.gateways(ctx, env)
	if err != nil {
		return out, &StepError{Env: env, Step: StepGateways, Err: err}
	}
	out.Gateways = gws
	if m.o.remoteSecrets {
		err := m.step("Installing remote secrets (control planes read the other clusters)", func() error {
			var err error
			out.RemoteSecrets, err = m.remoteSecrets(m.p).Ensure(ctx, env)
			return err
		})
		if err != nil {
			return out, &StepError{Env: env, Step: StepRemoteSecrets, Err: err}
		}
	}
	return out, nil
}

// remoteSecrets is the remote-secret manager of up's step, reading the
// environment from src: status checks the secrets with the very settings
// that write them.
func (m *Config) remoteSecrets(src remotesecret.Source) *remotesecret.Manager {
	return remotesecret.New(src, remotesecret.WithLogger(m.o.logger), remotesecret.WithServerByName(true), remotesecret.WithClients(m.o.clients))
}

// Locker takes an environment's lock (*cluster.Provider is one): every
// verb that changes an environment holds it throughout, so
// that a second meshctl on the same environment is refused instead of
// undoing the first one's work. A Provider that is not a Locker (a test's)
// is not locked.
type Locker interface {
	LockEnv(ctx context.Context, env, verb string) (context.Context, func(), error)
}

func (m *Config) lock(ctx context.Context, env, verb string) (context.Context, func(), error) {
	l, ok := m.p.(Locker)
	if !ok {
		return ctx, func() {}, nil
	}
	return l.LockEnv(ctx, env, verb)
}

// gateways gives each cluster of a multi-network environment MetalLB and an
// east-west gateway Service, and each primary of remotes (on any network)
// the Service its remotes reach its istiod through; otherwise it does
// nothing and says nothing.
func (m *Config) gateways(ctx context.Context, env string) ([]gateway.ClusterResult, error) {
	cs, err := m.p.Environment(ctx, env)
	if err != nil {
		return nil, err
	}
	plans := model.Plans(cs)
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
	err = m.step(title, func() error {
		opts := append([]gateway.Option{gateway.WithLogger(m.o.logger), gateway.WithClients(m.o.clients)}, m.o.gatewayOpts...)
		res, err = gateway.New(m.p, opts...).Install(ctx, env)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, c := range res.Clusters {
		if len(c.Addresses) > 0 {
			m.o.logger.V(0).Infof(" • %s (%s): east-west gateway %s", c.Cluster, c.Network, strings.Join(c.Addresses, ", "))
		}
		if len(c.IstiodAddresses) > 0 {
			m.o.logger.V(0).Infof(" • %s: istiod for remotes at %s", c.Cluster, strings.Join(c.IstiodAddresses, ", "))
		}
	}
	return res.Clusters, nil
}

// installCacerts gives every cluster its intermediate of the environment's
// shared root CA: the files are created or reused as `meshctl ca` does, then
// installed concurrently.
func (m *Config) installCacerts(ctx context.Context, up *cluster.UpResult) error {
	kubeconfigs := make(map[string]string, len(up.Clusters))
	for _, c := range up.Clusters {
		kubeconfigs[c.Name] = c.Kubeconfig
	}
	return meshca.New(meshca.Dir(m.o.artifacts, up.Env), meshca.WithName(up.Env), meshca.WithClients(m.o.clients)).Install(ctx, kubeconfigs)
}

// step runs f as one status line.
func (m *Config) step(title string, f func() error) error {
	status := cli.NewStatus(m.o.logger)
	status.Start(title)
	err := f()
	status.End(err == nil)
	return err
}
