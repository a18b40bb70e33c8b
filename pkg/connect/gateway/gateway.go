package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// DefaultTimeout bounds, per cluster, the wait for MetalLB and then for the
// gateway's address: a MetalLB cold start on a busy machine takes a minute.
const DefaultTimeout = 5 * time.Minute

// Source reports an environment's clusters and their kubeconfigs, and
// every cluster on the machine with meshctl's record of it, where each kind
// cluster's load-balancer pools are recorded; cluster.Provider is one.
type Source interface {
	Environment(ctx context.Context, env string) ([]cluster.ClusterPlan, error)
	ClusterKubeconfig(ctx context.Context, c cluster.ClusterPlan, internal bool) ([]byte, error)
	List(ctx context.Context) ([]cluster.Existing, error)
	SetPools(ctx context.Context, kindName string, pools *cluster.Pools) error
}

// ImageLoader makes images available to a kind cluster's nodes.
type ImageLoader interface {
	LoadImages(ctx context.Context, kindName string, images ...string) error
}

// Installer gives the clusters of a multi-network environment MetalLB, an
// address pool each and an east-west gateway Service.
type Installer struct {
	source          Source
	loader          ImageLoader
	docker          Docker
	logger          log.Logger
	network         string
	subnets         []netip.Prefix
	poolSize        int
	controllerImage string
	speakerImage    string
	timeout         time.Duration
	poll            time.Duration
	claimPause      time.Duration
	clients         *kubeclient.Factory
}

// Option configures an Installer.
type Option func(*Installer)

// WithLogger sets the logger.
func WithLogger(l log.Logger) Option { return func(i *Installer) { i.logger = l } }

// WithClients shares a kube-client factory (default: none).
func WithClients(f *kubeclient.Factory) Option { return func(i *Installer) { i.clients = f } }

// WithImages sets MetalLB's controller and speaker images (default the
// offline-built meshctl/metallb-* images); an empty one keeps its default.
func WithImages(controller, speaker string) Option {
	return func(i *Installer) {
		if controller != "" {
			i.controllerImage = controller
		}
		if speaker != "" {
			i.speakerImage = speaker
		}
	}
}

// WithUpstreamImages uses MetalLB's own quay.io images, for machines that
// can pull them.
func WithUpstreamImages() Option {
	return WithImages(UpstreamControllerImage, UpstreamSpeakerImage)
}

// WithImageLoader replaces how images get into the nodes (default: docker
// save of the local image, imported into each node's containerd, when the
// docker engine has it and the node does not).
func WithImageLoader(l ImageLoader) Option { return func(i *Installer) { i.loader = l } }

// WithDocker replaces the docker CLI (tests).
func WithDocker(d Docker) Option { return func(i *Installer) { i.docker = d } }

// WithSubnets sets the subnets to carve pools from instead of reading the
// kind docker network's.
func WithSubnets(s ...netip.Prefix) Option { return func(i *Installer) { i.subnets = s } }

// WithPoolSize sets the addresses per cluster and IP family (a power of
// two, default DefaultPoolSize).
func WithPoolSize(n int) Option { return func(i *Installer) { i.poolSize = n } }

// WithTimeout bounds, per cluster, the wait for MetalLB to be ready and then
// for the gateway's address.
func WithTimeout(d time.Duration) Option { return func(i *Installer) { i.timeout = d } }

// New returns an Installer that reads clusters from source.
func New(source Source, opts ...Option) *Installer {
	i := &Installer{
		source:          source,
		logger:          log.NoopLogger{},
		network:         cluster.KindNetwork(),
		poolSize:        DefaultPoolSize,
		controllerImage: DefaultControllerImage,
		speakerImage:    DefaultSpeakerImage,
		timeout:         DefaultTimeout,
		poll:            2 * time.Second,
		claimPause:      250 * time.Millisecond,
	}
	for _, o := range opts {
		o(i)
	}
	if i.docker == nil {
		i.docker = execDocker{}
	}
	if i.loader == nil {
		i.loader = &dockerLoader{docker: i.docker, logger: i.logger}
	}
	return i
}

// Result is what Install did.
type Result struct {
	Env string `json:"env"`
	// MultiNetwork is false when every cluster is on one network: then
	// nothing is installed.
	MultiNetwork bool            `json:"multiNetwork"`
	Clusters     []ClusterResult `json:"clusters"`
}

// ClusterResult is one cluster's pools and gateway.
type ClusterResult struct {
	Cluster  string `json:"cluster"`
	KindName string `json:"kindName"`
	Network  string `json:"network"`
	// Pools are the MetalLB address pools, one per IP family.
	Pools []string `json:"pools"`
	// Service is the gateway Service, namespace/name.
	Service string `json:"service"`
	// Addresses are the gateway's external addresses, from the pools.
	Addresses []string `json:"addresses"`
}

// Address is the gateway's first external address.
func (c ClusterResult) Address() string {
	if len(c.Addresses) == 0 {
		return ""
	}
	return c.Addresses[0]
}

// GatewayAddresses maps each network to its gateways' first addresses, as
// values.WithGatewayAddress takes them.
func (r *Result) GatewayAddresses() map[string][]string {
	out := map[string][]string{}
	for _, c := range r.Clusters {
		if a := c.Address(); a != "" {
			out[c.Network] = append(out[c.Network], a)
		}
	}
	return out
}

// target is one cluster with everything Install needs, known before any
// cluster is touched.
type target struct {
	index int
	plan  cluster.ClusterPlan
	pools []netip.Prefix
	cfg   *rest.Config
}

// Install sets up every cluster of env when the environment spans more
// than one network, in parallel, and waits for every gateway's address. It
// is idempotent: a rerun applies the same objects (server-side apply, so
// nothing changes) and reports the same addresses.
func (i *Installer) Install(ctx context.Context, env string) (*Result, error) {
	plans, err := i.source.Environment(ctx, env)
	if err != nil {
		return nil, err
	}
	if len(plans) == 0 {
		return nil, fmt.Errorf("environment %q has no clusters (create it with `meshctl up`)", env)
	}
	res := &Result{Env: env, Clusters: []ClusterResult{}}
	if !multiNetwork(plans) {
		return res, nil
	}
	res.MultiNetwork = true
	targets, err := i.targets(ctx, env, plans)
	if err != nil {
		return nil, err
	}
	res.Clusters = make([]ClusterResult, len(targets))
	err = parallel.ForEach(targets, func(t target) error {
		r, err := i.installOne(ctx, t)
		res.Clusters[t.index] = r
		if err != nil {
			return fmt.Errorf("cluster %s: %w", t.plan.Name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func inPools(addr string, pools []netip.Prefix) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	for _, p := range pools {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func multiNetwork(plans []cluster.ClusterPlan) bool {
	for _, p := range plans[1:] {
		if p.Network != plans[0].Network {
			return true
		}
	}
	return false
}

// targets validates everything before anything is changed — every
// kubeconfig reads and the pools fit the docker network — then claims the
// pools.
func (i *Installer) targets(ctx context.Context, env string, plans []cluster.ClusterPlan) ([]target, error) {
	var out []target
	for k, p := range plans {
		kc, err := i.source.ClusterKubeconfig(ctx, p, false)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", p.Name, err)
		}
		cfg, err := i.clients.Bytes(kc, "").RESTConfig()
		if err != nil {
			return nil, fmt.Errorf("cluster %s: kubeconfig: %w", p.Name, err)
		}
		out = append(out, target{index: k, plan: p, cfg: cfg})
	}
	// Only kind clusters get MetalLB pools carved from the docker network:
	// an environment of existing clusters alone needs no Docker at all. An
	// existing cluster is not on the kind network: its load balancers are
	// its own (a cloud's, or whatever it runs), so it gets no MetalLB and
	// no pool, only the gateway Service.
	if !anyKind(plans) {
		return out, nil
	}
	subnets := i.subnets
	if subnets == nil {
		var err error
		if subnets, err = dockerSubnets(ctx, i.docker, i.network); err != nil {
			return nil, err
		}
	}
	pools, err := i.claimPools(ctx, env, plans, subnets)
	if err != nil {
		return nil, err
	}
	for k := range out {
		out[k].pools = pools[k]
	}
	return out, nil
}

func anyKind(plans []cluster.ClusterPlan) bool {
	for _, p := range plans {
		if !p.Existing {
			return true
		}
	}
	return false
}

// installOne is the story of one cluster: images, MetalLB, its pool, the
// gateway Service and its address.
func (i *Installer) installOne(ctx context.Context, t target) (ClusterResult, error) {
	r := ClusterResult{Cluster: t.plan.Name, KindName: t.plan.KindName, Network: t.plan.Network,
		Service: GatewayNamespace + "/" + GatewayName}
	for _, p := range t.pools {
		r.Pools = append(r.Pools, p.String())
	}
	k, err := newKube(t.cfg)
	if err != nil {
		return r, err
	}
	if t.plan.Existing {
		return i.existingGateway(ctx, k, r, t)
	}
	if err := i.loader.LoadImages(ctx, t.plan.KindName, i.controllerImage, i.speakerImage); err != nil {
		return r, fmt.Errorf("loading MetalLB images: %w", err)
	}
	objs, err := metallbObjects(i.controllerImage, i.speakerImage)
	if err != nil {
		return r, err
	}
	i.logger.V(1).Infof("%s: applying MetalLB %s (%d objects)", t.plan.Name, MetalLBVersion, len(objs))
	if err := k.applyAll(ctx, objs); err != nil {
		return r, fmt.Errorf("installing MetalLB: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, i.timeout)
	defer cancel()
	if err := k.waitMetalLB(ctx, i.poll); err != nil {
		return r, fmt.Errorf("MetalLB not ready after %s: %w (see `kubectl -n %s get pods` in the cluster)", i.timeout, err, MetalLBNamespace)
	}
	// MetalLB's webhook answers a little after its pods are ready (its
	// certificate is generated at start): retry until it accepts the pool.
	if err := k.retry(ctx, i.poll, func() error { return k.applyAll(ctx, poolObjects(t.pools)) }); err != nil {
		return r, fmt.Errorf("applying the MetalLB address pool %s: %w", strings.Join(r.Pools, ", "), err)
	}
	if err := k.applyAll(ctx, gatewayObjects(t.plan.Network)); err != nil {
		return r, fmt.Errorf("applying the east-west gateway service: %w", err)
	}
	addrs, err := k.waitAddress(ctx, i.poll)
	if err != nil {
		return r, fmt.Errorf("east-west gateway service %s has no external address after %s: %w", r.Service, i.timeout, err)
	}
	r.Addresses = addrs
	for _, a := range addrs {
		if !inPools(a, t.pools) {
			i.logger.Warnf("%s: the east-west gateway's address %s is not from MetalLB's pool %s: another load-balancer controller assigned it", t.plan.Name, a, strings.Join(r.Pools, ", "))
		}
	}
	i.logger.V(1).Infof("%s: east-west gateway at %s (pool %s)", t.plan.Name, strings.Join(addrs, ", "), strings.Join(r.Pools, ", "))
	return r, nil
}

// existingGateway gives an existing cluster only the gateway Service and
// waits for the address its own load-balancer controller assigns.
func (i *Installer) existingGateway(ctx context.Context, k *kube, r ClusterResult, t target) (ClusterResult, error) {
	if err := k.applyAll(ctx, gatewayObjects(t.plan.Network)); err != nil {
		return r, fmt.Errorf("applying the east-west gateway service: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, i.timeout)
	defer cancel()
	addrs, err := k.waitAddress(ctx, i.poll)
	if err != nil {
		return r, fmt.Errorf("east-west gateway service %s has no external address after %s: %w (an existing cluster needs a load-balancer controller of its own: meshctl installs MetalLB only on kind clusters)", r.Service, i.timeout, err)
	}
	r.Addresses = addrs
	i.logger.V(1).Infof("%s: east-west gateway at %s (the cluster's own load balancer)", t.plan.Name, strings.Join(addrs, ", "))
	return r, nil
}
