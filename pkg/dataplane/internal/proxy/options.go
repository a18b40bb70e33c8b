package proxy

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"

	"k8s.io/client-go/rest"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/hbone"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
)

// Per-workload limits (withWorkloadLimits). A connect costs the proxy a
// socket and a goroutine until the peer answers (up to the 10 s dial
// timeout): one pod dialing a black hole must not take the node's proxy
// down with it.
const (
	defaultMaxDials = 256
	defaultMaxConns = 4096
)

// hboneRoute is where an outbound connection goes over HBONE.
type hboneRoute struct {
	Gateway  netip.AddrPort    // destination ip:15008, or an east-west gateway
	Identity identity.Identity // expected server identity; zero = any in the trust domain
}

// Option configures a Proxy.
type Option func(*options)

type options struct {
	events       WorkloadEvents
	trustDomain  string
	fetcher      certs.Fetcher
	adminAddr    string
	metricsAddr  string
	readyAddr    string
	ports        [3]int // outbound, inbound, hbone
	mark         int
	resolve      func(dst netip.AddrPort) (hboneRoute, bool)
	meshCIDRs    []netip.Prefix
	log          *slog.Logger
	hboneOptions []hbone.Option
	// preserveSource: deliver inbound connections from the client's address.
	preserveSource bool
	setTransparent func(fd int, v6 bool) error // tests replace it to take the capability away
	// Per workload: connects in progress, and captured connections being
	// served on each of 15001 and 15006.
	maxDials, maxConns int

	// The service model (WithDiscovery); model and source, when set,
	// replace what discovery builds (tests).
	discovery *Discovery
	xds       *XDS
	model     model.Interface
	source    model.Source
	// learnWait is how long a connection to a mesh address the model does
	// not know waits for the model to learn it (see Proxy.resolve).
	learnWait time.Duration
	// Authorization: policyConfig is the cluster to watch; policies, set
	// directly by tests, the store to enforce.
	policyConfig *rest.Config
	policyRootNS string
	policies     *policy.Store
	// gatewayListener replaces the gateway's own listen (tests serve it
	// in a network namespace).
	gatewayListener net.Listener
}

func defaults() options {
	return options{
		trustDomain:    ambient.DefaultTrustDomain,
		adminAddr:      "127.0.0.1:15000",
		metricsAddr:    ":15020",
		readyAddr:      ":15021",
		ports:          [3]int{ambient.PortOutbound, ambient.PortInbound, ambient.PortHBONE},
		mark:           hbone.DefaultMark,
		preserveSource: true,
		learnWait:      defaultLearnWait,
		setTransparent: setTransparent,
		maxDials:       defaultMaxDials,
		maxConns:       defaultMaxConns,
		log:            slog.New(slog.DiscardHandler),
	}
}

// WithWorkloadEvents sets where pods come from (the ZDS client, adapted).
func WithWorkloadEvents(e WorkloadEvents) Option { return func(o *options) { o.events = e } }

// WithTrustDomain sets the mesh trust domain.
func WithTrustDomain(td string) Option { return func(o *options) { o.trustDomain = td } }

// WithFetcher sets how certificates are obtained (CSRs in a cluster).
func WithFetcher(f certs.Fetcher) Option { return func(o *options) { o.fetcher = f } }

// WithAddresses sets the admin, metrics and readiness listen addresses; an
// empty string disables that server. Admin should stay on localhost: it
// shows certificates.
func WithAddresses(admin, metrics, readiness string) Option {
	return func(o *options) { o.adminAddr, o.metricsAddr, o.readyAddr = admin, metrics, readiness }
}

// withPorts overrides the in-pod ports (outbound, inbound, HBONE); tests that
// run several "pods" in one namespace use 0 for ephemeral ports.
func withPorts(outbound, inbound, hboneP int) Option {
	return func(o *options) { o.ports = [3]int{outbound, inbound, hboneP} }
}

// withMark sets the SO_MARK of the proxy's own sockets (0 disables).
func withMark(mark int) Option { return func(o *options) { o.mark = mark } }

// withResolver decides, per original destination, whether and where to use
// HBONE; destinations it declines are passed through as plain TCP.
func withResolver(f func(dst netip.AddrPort) (hboneRoute, bool)) Option {
	return func(o *options) { o.resolve = f }
}

// WithMeshCIDRs sends destinations in these prefixes over HBONE to
// <dst-ip>:15008 when no resolver claims them (typically the pod CIDRs).
// With a service model (WithDiscovery) the model decides instead, and a
// destination in these prefixes that the model does not know is refused:
// it would otherwise go to a server whose identity nothing vouches for.
func WithMeshCIDRs(p ...netip.Prefix) Option { return func(o *options) { o.meshCIDRs = p } }

// Discovery configures the service model's standalone source: informers
// on the local cluster and on every cluster its remote secrets name.
type Discovery struct {
	// Client reads the local cluster.
	Client kubernetes.Interface
	// Cluster is the local cluster's name (Istio's clusterName).
	Cluster string
	// Network is the local network, and that of every cluster whose
	// system namespace carries no topology.istio.io/network label.
	Network string
	// SystemNamespace holds the remote secrets (default istio-system).
	SystemNamespace string
	// ExcludeNamespaces are never in the mesh (the node agent's list).
	ExcludeNamespaces []string
}

// kubeModel is the standalone source: a model of the mesh fed by informers
// over the local cluster and, through its remote secrets, the others.
func (d *Discovery) kubeModel(o options) (model.Interface, model.Source, error) {
	if d.Client == nil {
		return nil, nil, errors.New("WithDiscovery needs a Kubernetes client")
	}
	return model.New(d.Cluster, d.Network), model.NewKube(d.Client, model.KubeConfig{
		Cluster: d.Cluster, Network: d.Network, TrustDomain: o.trustDomain,
		SystemNamespace: d.SystemNamespace, ExcludeNamespaces: d.ExcludeNamespaces, Log: o.log,
	}), nil
}

// WithDiscovery gives the proxy a model of the mesh's workloads and
// services: a connection to a Service VIP goes over HBONE to a ready
// endpoint, port mapped to its target port, and every tunnel requires the
// destination workload's identity from the server.
func WithDiscovery(d Discovery) Option { return func(o *options) { o.discovery = &d } }

// XDS configures the service model's XDS source: istiod, as ztunnel reads
// it (delta ADS on 15012 for istio.workload.Address and
// istio.security.Authorization).
type XDS struct {
	// Address is istiod's XDS address, e.g. istiod.istio-system.svc:15012.
	Address string
	// ServerName is the name istiod's certificate is verified for (empty:
	// Address's host).
	ServerName string
	// Roots returns the PEM mesh roots istiod's certificate must chain to.
	Roots func() ([]byte, error)
	// Token returns the proxy's service-account token (audience istio-ca).
	Token func() (string, error)
	// Cluster is this cluster's name (Istio's clusterName): the clusterid
	// header and the node's CLUSTER_ID.
	Cluster string
	// Network is this proxy's network: only endpoints on it are reached
	// directly.
	Network string
	// RootNamespace is istiod's root namespace ("" for istio-system).
	RootNamespace string
	// PodName, PodNamespace, NodeName and InstanceIP name the proxy to
	// istiod; empty ones are read from POD_NAME, POD_NAMESPACE, NODE_NAME
	// and INSTANCE_IP, as ztunnel reads them, with ISTIO_META_* and
	// ISTIO_METAJSON_* as further metadata.
	PodName, PodNamespace, NodeName, InstanceIP string
	// DialOptions are added to the gRPC client's (tests).
	DialOptions []grpc.DialOption
}

// WithXDS gives the proxy a model of the mesh's workloads and services,
// and its authorization policies, from istiod's XDS instead of reading the
// clusters itself (WithDiscovery, WithPolicies): outbound, secure naming
// and L4 policy work the same from either source.
func WithXDS(x XDS) Option { return func(o *options) { o.xds = &x } }

// WithLogger sets the structured logger; its handler's level is the verbosity.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// withHBONEOptions passes options to every HBONE dialer and server.
func withHBONEOptions(opts ...hbone.Option) Option {
	return func(o *options) { o.hboneOptions = append(o.hboneOptions, opts...) }
}

// withWorkloadLimits caps, per workload, the connects in progress (over
// the cap a dial fails at once and the client sees a reset; counted in
// meshctl_proxy_dials_refused_total) and the captured connections served
// at once on each of 15001 and 15006 (over it the proxy stops accepting on
// that port until one ends; the kernel's backlog holds the rest). 15008's
// limits are the HBONE server's own. Zero or less keeps
// the default.
func withWorkloadLimits(dials, conns int) Option {
	return func(o *options) {
		if dials > 0 {
			o.maxDials = dials
		}
		if conns > 0 {
			o.maxConns = conns
		}
	}
}

// WithPolicies enforces the AuthorizationPolicies and PeerAuthentications
// (security.istio.io/v1) of the cluster cfg points at, as ztunnel does, on
// inbound tunnels and captured plaintext; rootNamespace ("" for
// istio-system) holds the mesh-wide ones. The proxy watches for the CRDs
// and starts reading policies when Istio's base chart installs them.
func WithPolicies(cfg *rest.Config, rootNamespace string) Option {
	return func(o *options) { o.policyConfig, o.policyRootNS = cfg, rootNamespace }
}
