package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/hbone"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
)

// eastWest is the proxy in its east-west gateway mode: the address other
// networks reach this one through (behind istio-system/istio-eastwestgateway),
// as Istio's ambient east-west gateway. It terminates the outer tunnel of
// ztunnel's double HBONE with its own identity, picks by the service model
// a ready meshed endpoint, on its own network, of the service the
// CONNECT's :authority names (host:port), and splices the stream to that
// endpoint's node proxy on 15008 without reading it: the inner tunnel's
// mutual TLS stays between the client's and the endpoint's proxies, so
// the endpoint sees — and its policies judge — the client's own identity,
// and the client holds the endpoint to the service's identities.
type eastWest struct {
	opts    options
	cfg     GatewayConfig
	id      identity.Identity
	certs   *certs.Manager
	reg     *prometheus.Registry
	metrics *hbone.Metrics
	routed  *prometheus.CounterVec
	model   model.Interface
	source  model.Source
	ready   atomic.Bool // the first certificate is in
}

// GatewayConfig is the gateway's own pod: its identity is the pod's
// service account's, and its certificate is requested for the pod.
type GatewayConfig struct {
	Namespace, ServiceAccount string
	PodName, PodUID           string
	// Listen is where outer tunnels arrive (default :15008).
	Listen string
}

// newEastWest builds a gateway; WithDiscovery (or a model) and WithFetcher
// are required. The per-pod options (workload
// events, ports, mesh CIDRs, policies) do not apply.
func newEastWest(cfg GatewayConfig, opts ...Option) (*eastWest, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.Namespace == "" || cfg.ServiceAccount == "" || cfg.PodName == "" {
		return nil, errors.New("gateway: its pod's namespace, name and service account are required (they make its identity)")
	}
	if cfg.Listen == "" {
		cfg.Listen = ":" + strconv.Itoa(ambient.PortHBONE)
	}
	g := &eastWest{opts: o, cfg: cfg, id: identity.New(o.trustDomain, cfg.Namespace, cfg.ServiceAccount), reg: prometheus.NewRegistry()}
	if o.fetcher == nil {
		return nil, errors.New("gateway: WithFetcher is required")
	}
	g.certs = certs.New(o.fetcher, certs.WithLogger(o.log))
	g.model, g.source = o.model, o.source
	if d := o.discovery; d != nil && g.model == nil {
		var err error
		if g.model, g.source, err = d.kubeModel(o); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	if g.model == nil {
		return nil, errors.New("gateway: WithDiscovery is required: endpoints are picked from the service model")
	}
	g.metrics = hbone.NewMetrics(g.reg)
	g.routed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshctl_gateway_tunnels_total",
		Help: "Tunnels from other networks, by result: forwarded (to an endpoint's node proxy), no_endpoint (the named service has no ready meshed endpoint on this network, or is unknown)."},
		[]string{"result"})
	g.reg.MustRegister(g.routed, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return g, nil
}

// RunGateway builds an east-west gateway and runs it until ctx ends: the entry point
// of the dataplane binary's gateway command.
func RunGateway(ctx context.Context, cfg GatewayConfig, opts ...Option) error {
	g, err := newEastWest(cfg, opts...)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// Identity is the identity the gateway proves to clients.
func (g *eastWest) Identity() identity.Identity { return g.id }

// Registry is the gateway's metrics.
func (g *eastWest) Registry() *prometheus.Registry { return g.reg }

// route picks the next hop for a tunnel to service host:port.
func (g *eastWest) route(host string, port uint16) (netip.AddrPort, bool) {
	dst, ok := g.model.GatewayTarget(host, port)
	if !ok {
		g.routed.WithLabelValues("no_endpoint").Inc()
		g.opts.log.Debug("gateway: no endpoint", "service", host, "port", port)
		return dst, false
	}
	g.routed.WithLabelValues("forwarded").Inc()
	return dst, true
}

// Run serves tunnels, admin, metrics and readiness until ctx ends.
func (g *eastWest) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer g.certs.Close()
	g.certs.Track(g.id, certs.Pod{Namespace: g.cfg.Namespace, Name: g.cfg.PodName, UID: g.cfg.PodUID})
	defer g.certs.Untrack(g.id, g.cfg.PodUID)
	server, err := hbone.NewServer(append([]hbone.Option{
		hbone.WithTrustDomain(g.opts.trustDomain),
		hbone.WithRoots(g.certs.Roots),
		hbone.WithMetrics(g.metrics),
		hbone.WithLogger(g.opts.log),
		// No SO_MARK: the gateway runs in a pod of its own, without
		// capture rules to bypass (and without CAP_NET_ADMIN to mark).
		hbone.WithServerCertificates(func(ctx context.Context, _ netip.Addr) (*tls.Certificate, error) {
			return g.certs.Certificate(ctx, g.id)
		}),
		hbone.WithRelay(g.route),
	}, g.opts.hboneOptions...)...)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	ln := g.opts.gatewayListener
	if ln == nil {
		if ln, err = net.Listen("tcp", g.cfg.Listen); err != nil {
			return fmt.Errorf("gateway: listen %s: %w", g.cfg.Listen, err)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, s := range []struct {
		addr string
		h    http.Handler
	}{{g.opts.adminAddr, g.adminHandler()}, {g.opts.metricsAddr, promhttpHandler(g.reg)}, {g.opts.readyAddr, g.readyHandler()}} {
		if s.addr == "" {
			continue
		}
		l, err := net.Listen("tcp", s.addr)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("gateway: listen %s: %w", s.addr, err)
		}
		srv := &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second}
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.Serve(l) }()
		context.AfterFunc(ctx, func() { _ = srv.Close() })
	}
	if g.source != nil {
		wg.Add(1)
		go func() { defer wg.Done(); runSource(ctx, g.source, g.model, g.opts.log) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Ready once the gateway can prove its identity: before, every
		// client's handshake would fail.
		for ctx.Err() == nil {
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := g.certs.Certificate(cctx, g.id)
			ccancel()
			if err == nil {
				g.ready.Store(true)
				return
			}
			g.opts.log.Warn("gateway: waiting for its certificate", "identity", g.id.String(), "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	g.opts.log.Info("east-west gateway serving", "addr", ln.Addr().String(), "identity", g.id.String())
	return server.Serve(ctx, ln)
}

// Ready reports whether the gateway has its certificate and the model has
// synced.
func (g *eastWest) Ready() bool { return g.ready.Load() && g.model.Synced() }

func (g *eastWest) readyHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz/ready", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !g.ready.Load():
			http.Error(w, "waiting for the gateway's certificate", http.StatusServiceUnavailable)
		case !g.model.Synced():
			http.Error(w, "waiting for the service model to sync", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ready\n"))
		}
	})
	return mux
}

// gatewayDump is the gateway's /config_dump: the model it routes by and
// its certificate.
type gatewayDump struct {
	Workloads    []model.WorkloadDump `json:"workloads"`
	Services     []model.ServiceDump  `json:"services"`
	Certificates []certs.CertDump     `json:"certificates"`
}

func (g *eastWest) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /config_dump", func(w http.ResponseWriter, _ *http.Request) {
		md := g.model.Dump()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(gatewayDump{Workloads: md.Workloads, Services: md.Services, Certificates: g.certs.Dump()})
	})
	return mux
}
