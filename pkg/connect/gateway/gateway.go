package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// DefaultTimeout bounds, per cluster, the wait for MetalLB and then for the
// gateway's address: a MetalLB cold start on a busy machine takes a minute.
const DefaultTimeout = 5 * time.Minute

// Source reports an environment's clusters and their kubeconfigs, and
// every cluster on the machine with meshctl's record of it, where each kind
// cluster's load-balancer pools are recorded; cluster.Provider is one.
type Source interface {
	Environment(ctx context.Context, env string) ([]model.ClusterState, error)
	ClusterKubeconfig(ctx context.Context, c model.ClusterPlan, internal bool) ([]byte, error)
	List(ctx context.Context) ([]cluster.Listed, error)
	SetPools(ctx context.Context, kindName string, pools *model.Pools) error
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

// WithSubnets sets the subnets to carve pools from instead of reading the
// kind docker network's.
func WithSubnets(s ...netip.Prefix) Option { return func(i *Installer) { i.subnets = s } }

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
		// MetalLB's pods, the pool's acceptance and a Service's address
		// each come within seconds: a GET every half second finds them
		// when they do (2 s cost up to 2 s at each of the three waits).
		poll:       500 * time.Millisecond,
		claimPause: 250 * time.Millisecond,
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
	// there are no east-west gateways, and only primaries of remotes get
	// MetalLB (for IstiodServiceName).
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
	Service string `json:"service,omitempty"`
	// Addresses are the gateway's external addresses, from the pools.
	Addresses []string `json:"addresses"`
	// IstiodAddresses are where the cluster's remotes reach its istiod
	// (IstiodServiceName's external addresses); only on primaries of
	// remotes.
	IstiodAddresses []string `json:"istiodAddresses,omitempty"`
}

// IstiodAddress is the first of IstiodAddresses.
func (c ClusterResult) IstiodAddress() string {
	if len(c.IstiodAddresses) == 0 {
		return ""
	}
	return c.IstiodAddresses[0]
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
	plan  model.ClusterPlan
	pools []netip.Prefix
	cfg   *rest.Config
	// gateway: an east-west gateway (more than one network); istiod: the
	// istiod Service (a primary of remotes).
	gateway, istiod bool
}

// Install sets up every cluster of env when the environment spans more
// than one network, in parallel, and waits for every gateway's address. It
// is idempotent: a rerun applies the same objects (server-side apply, so
// nothing changes) and reports the same addresses.
func (i *Installer) Install(ctx context.Context, env string) (*Result, error) {
	cs, err := i.source.Environment(ctx, env)
	if err != nil {
		return nil, err
	}
	plans := model.Plans(cs)
	if len(plans) == 0 {
		return nil, fmt.Errorf("environment %q has no clusters (create it with `meshctl up`)", env)
	}
	if r, ok := i.loader.(interface{ release() }); ok {
		defer r.release() // the image archives its clusters shared
	}
	res := &Result{Env: env, Clusters: []ClusterResult{}, MultiNetwork: multiNetwork(plans)}
	primaries := PrimariesOfRemotes(plans)
	if !res.MultiNetwork {
		// One network: no gateways; MetalLB only where remotes need an
		// address for their primary's istiod.
		plans = slices.DeleteFunc(slices.Clone(plans), func(p model.ClusterPlan) bool { return !primaries[p.Name] })
		if len(plans) == 0 {
			return res, nil
		}
	}
	targets, err := i.targets(ctx, env, plans, res.MultiNetwork, primaries)
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

// PrimariesOfRemotes names the clusters of plans that another cluster has
// as its primary: those expose their istiod to their remotes.
func PrimariesOfRemotes(plans []model.ClusterPlan) map[string]bool {
	out := map[string]bool{}
	for _, p := range plans {
		if p.PrimaryClusterName != "" && p.PrimaryClusterName != p.Name {
			out[p.PrimaryClusterName] = true
		}
	}
	return out
}

func multiNetwork(plans []model.ClusterPlan) bool {
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
func (i *Installer) targets(ctx context.Context, env string, plans []model.ClusterPlan, multi bool, primaries map[string]bool) ([]target, error) {
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
		out = append(out, target{index: k, plan: p, cfg: cfg, gateway: multi, istiod: primaries[p.Name]})
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

func anyKind(plans []model.ClusterPlan) bool {
	for _, p := range plans {
		if !p.Existing {
			return true
		}
	}
	return false
}

// installOne is the story of one cluster: images, MetalLB, its pool, the
// gateway and istiod Services and their addresses.
func (i *Installer) installOne(ctx context.Context, t target) (ClusterResult, error) {
	r := ClusterResult{Cluster: t.plan.Name, KindName: t.plan.KindName, Network: t.plan.Network}
	if t.gateway {
		r.Service = GatewayNamespace + "/" + GatewayName
	}
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
	// An environment made by an earlier meshctl has MetalLB's webhook
	// configuration, which nothing serves now: the pool's apply would fail.
	if err := k.deleteManaged(ctx, webhookConfigurationName); err != nil {
		return r, fmt.Errorf("removing MetalLB's webhook configuration: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, i.timeout)
	defer cancel()
	if err := k.waitMetalLB(ctx, i.poll); err != nil {
		return r, fmt.Errorf("MetalLB not ready after %s: %w (see `kubectl -n %s get pods` in the cluster)", i.timeout, err, MetalLBNamespace)
	}
	// The IPAddressPool CRD is established a moment after it is created:
	// retry until the pool is accepted.
	if err := k.retry(ctx, i.poll, func() error { return k.applyAll(ctx, poolObjects(t.pools)) }); err != nil {
		return r, fmt.Errorf("applying the MetalLB address pool %s: %w", strings.Join(r.Pools, ", "), err)
	}
	return i.services(ctx, k, r, t, "")
}

// services applies the east-west gateway and istiod Services t needs and
// waits for their addresses; hint is added to a wait's error.
func (i *Installer) services(ctx context.Context, k *kube, r ClusterResult, t target, hint string) (ClusterResult, error) {
	if t.gateway {
		if err := k.applyAll(ctx, gatewayObjects(t.plan.Network)); err != nil {
			return r, fmt.Errorf("applying the east-west gateway service: %w", err)
		}
	}
	if t.istiod {
		if err := k.applyAll(ctx, istiodObjects(t.plan.Network)); err != nil {
			return r, fmt.Errorf("applying the istiod service for remotes: %w", err)
		}
	}
	if t.gateway {
		addrs, err := k.waitAddress(ctx, i.poll, GatewayName)
		if err != nil {
			return r, fmt.Errorf("east-west gateway service %s has no external address after %s: %w%s", r.Service, i.timeout, err, hint)
		}
		r.Addresses = addrs
		i.checkPools(t, "east-west gateway", addrs)
		i.logger.V(1).Infof("%s: east-west gateway at %s", t.plan.Name, strings.Join(addrs, ", "))
	}
	if t.istiod {
		addrs, err := k.waitAddress(ctx, i.poll, IstiodServiceName)
		if err != nil {
			return r, fmt.Errorf("service %s/%s has no external address after %s: %w%s", GatewayNamespace, IstiodServiceName, i.timeout, err, hint)
		}
		r.IstiodAddresses = addrs
		i.checkPools(t, "istiod service", addrs)
		i.logger.V(1).Infof("%s: istiod for remotes at %s", t.plan.Name, strings.Join(addrs, ", "))
	}
	return r, nil
}

// checkPools warns about addresses that are not from t's pools (kind
// clusters only: an existing cluster's load balancer is its own).
func (i *Installer) checkPools(t target, what string, addrs []string) {
	if t.plan.Existing {
		return
	}
	for _, a := range addrs {
		if !inPools(a, t.pools) {
			i.logger.Warnf("%s: the %s's address %s is not from MetalLB's pool %s: another load-balancer controller assigned it", t.plan.Name, what, a, join(t.pools))
		}
	}
}

// existingGateway gives an existing cluster only the Services (no MetalLB)
// and waits for the addresses its own load-balancer controller assigns.
func (i *Installer) existingGateway(ctx context.Context, k *kube, r ClusterResult, t target) (ClusterResult, error) {
	ctx, cancel := context.WithTimeout(ctx, i.timeout)
	defer cancel()
	return i.services(ctx, k, r, t, " (an existing cluster needs a load-balancer controller of its own: meshctl installs MetalLB only on kind clusters)")
}
