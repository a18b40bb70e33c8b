package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/probesnat"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/redirect"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/zds"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// Redirector sets up and tears down the in-pod redirection in one netns.
// *redirect.Redirector is the real one.
type Redirector interface {
	Apply(netns *os.File) error
	Remove(netns *os.File) error
}

// ProbeSNAT keeps the node-side SNAT that lets kubelet probes through the
// in-pod rules. *probesnat.SNAT is the real one.
type ProbeSNAT interface {
	Setup(pods ...netip.Addr) error
	AddPod(ips ...netip.Addr) error
	RemovePod(ips ...netip.Addr) error
}

// Agent is the node agent.
type Agent struct {
	client       kubernetes.Interface
	node         string
	excluded     []string
	pluginSocket string
	zdsSocket    string
	stateDir     string
	rules        Redirector
	probes       ProbeSNAT
	registerer   prometheus.Registerer
	zdsTimeout   time.Duration
	log          *slog.Logger
	metricsAddr  string
	procRoot     string

	zds       *zds.Server
	podLister corelisters.PodLister
	nsLister  corelisters.NamespaceLister
	mu        sync.Mutex // serializes pod changes and state writes
	pods      map[string]*meshedPod
}

// meshedPod is a pod the agent has meshed (netns nil: known from before a
// restart but its netns could not be reopened).
type meshedPod struct {
	rec   podRecord
	netns *os.File
}

// Option configures an Agent.
type Option func(*Agent)

// WithClient sets the Kubernetes client (default: in-cluster config).
func WithClient(c kubernetes.Interface) Option { return func(a *Agent) { a.client = c } }

// WithNodeName sets this node's name (default: $NODE_NAME).
func WithNodeName(n string) Option { return func(a *Agent) { a.node = n } }

// WithExcludeNamespaces sets namespaces never meshed (default: kube-system).
func WithExcludeNamespaces(ns ...string) Option { return func(a *Agent) { a.excluded = ns } }

// WithPluginSocket sets the unix socket the CNI plugin posts to.
func WithPluginSocket(p string) Option { return func(a *Agent) { a.pluginSocket = p } }

// WithZDSSocket sets the unix socket the proxy connects to.
func WithZDSSocket(p string) Option { return func(a *Agent) { a.zdsSocket = p } }

// WithZDSTimeout sets the ZDS per-exchange deadline (default 5s).
func WithZDSTimeout(d time.Duration) Option { return func(a *Agent) { a.zdsTimeout = d } }

// WithStateDir sets where meshed pods are remembered across restarts; it
// must be on the host (hostPath), or a restart forgets them.
func WithStateDir(d string) Option { return func(a *Agent) { a.stateDir = d } }

// WithRedirector replaces the nftables redirection (tests without root).
func WithRedirector(r Redirector) Option { return func(a *Agent) { a.rules = r } }

// WithProbeSNAT replaces the node-side probe SNAT (tests without root).
func WithProbeSNAT(p ProbeSNAT) Option { return func(a *Agent) { a.probes = p } }

// WithRegisterer registers the agent's metrics (ztunnel_connected) there.
func WithRegisterer(r prometheus.Registerer) Option { return func(a *Agent) { a.registerer = r } }

// WithMetricsAddr serves Prometheus metrics (ztunnel_connected) on addr at
// /metrics, from the registry given to WithRegisterer when it can gather.
func WithMetricsAddr(addr string) Option { return func(a *Agent) { a.metricsAddr = addr } }

// WithProcRoot sets where the host's procfs is mounted (default /proc; the
// agent needs hostPID), searched for the netns of pods enrolled while
// already running.
func WithProcRoot(dir string) Option { return func(a *Agent) { a.procRoot = dir } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(a *Agent) { a.log = l } }

// New returns an Agent with the DaemonSet's defaults.
func New(opts ...Option) *Agent {
	a := &Agent{
		node:         os.Getenv("NODE_NAME"),
		excluded:     ambient.DefaultExcludedNamespaces,
		pluginSocket: ambient.DefaultAgentSocket,
		zdsSocket:    zds.DefaultSocketPath,
		stateDir:     "/var/run/meshctl/agent",
		procRoot:     "/proc",
		rules:        redirect.New(),
		probes:       probesnat.New(),
		registerer:   prometheus.DefaultRegisterer,
		zdsTimeout:   zds.DefaultTimeout,
		log:          slog.Default(),
		pods:         map[string]*meshedPod{},
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Run runs New(opts...) until ctx ends.
func Run(ctx context.Context, opts ...Option) error {
	return New(opts...).Run(ctx)
}

// Run serves until ctx ends. Order matters: pods are restored before the
// proxy may connect, so its first snapshot is complete (an incomplete one
// would make it drop running pods).
func (a *Agent) Run(ctx context.Context) error {
	if a.node == "" {
		return errors.New("node agent: node name not set (NODE_NAME)")
	}
	if a.client == nil {
		var err error
		if a.client, err = kubeclient.InCluster().Kubernetes(); err != nil {
			return fmt.Errorf("node agent: in-cluster client: %w", err)
		}
	}
	a.zds = zds.NewServer(zds.WithSocketPath(a.zdsSocket), zds.WithRegisterer(a.registerer),
		zds.WithTimeout(a.zdsTimeout), zds.WithLogger(a.log))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := a.startInformers(ctx); err != nil {
		return err
	}
	restored, err := a.restore(ctx)
	if err != nil {
		return err
	}

	ln, err := listenUnix(a.pluginSocket)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: a.pluginHandler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 3)
	if a.metricsAddr != "" {
		stop, err := a.serveMetrics(errc)
		if err != nil {
			return err
		}
		defer stop()
	}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("plugin server: %w", err)
		}
	}()
	go func() {
		if err := a.zds.Run(ctx); err != nil {
			errc <- fmt.Errorf("zds server: %w", err)
		}
	}()
	a.log.Info("node agent ready", "node", a.node, "restored", restored)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	return errors.Join(err, srv.Shutdown(shutdownCtx))
}

func (a *Agent) startInformers(ctx context.Context) error {
	// Only this node's pods: on a big cluster the agent must not cache all.
	podFactory := informers.NewSharedInformerFactoryWithOptions(a.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + a.node }))
	nsFactory := informers.NewSharedInformerFactory(a.client, 0)
	podInf := podFactory.Core().V1().Pods()
	nsInf := nsFactory.Core().V1().Namespaces()
	a.podLister, a.nsLister = podInf.Lister(), nsInf.Lister()
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { a.podChanged(ctx, obj) },
		DeleteFunc: func(obj any) { a.podDeleted(ctx, obj) },
	}); err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	if _, err := nsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { a.namespaceChanged(ctx, obj) },
	}); err != nil {
		return fmt.Errorf("watching namespaces: %w", err)
	}
	podFactory.Start(ctx.Done())
	nsFactory.Start(ctx.Done())
	for typ, ok := range podFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("syncing %v informer: %w", typ, context.Cause(ctx))
		}
	}
	for typ, ok := range nsFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("syncing %v informer: %w", typ, context.Cause(ctx))
		}
	}
	return nil
}

// listenUnix listens on path, replacing a socket a previous agent left.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating socket dir: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return ln, nil
}

func workloadInfo(p *corev1.Pod) zds.WorkloadInfo {
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default" // what admission would have set; the identity needs one
	}
	return zds.WorkloadInfo{Name: p.Name, Namespace: p.Namespace, ServiceAccount: sa}
}

func (a *Agent) serveMetrics(errc chan<- error) (stop func(), err error) {
	g, ok := a.registerer.(prometheus.Gatherer)
	if !ok {
		g = prometheus.DefaultGatherer
	}
	ln, err := net.Listen("tcp", a.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("serving metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics server: %w", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}
