package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
)

// Proxy is one node proxy.
type Proxy struct {
	opts    options
	certs   *certs.Manager
	reg     *prometheus.Registry
	metrics *hbone.Metrics
	wlGauge prometheus.Gauge
	ready   atomic.Bool

	policies *policy.Store // nil: no authorization
	// policyWatcher is the cluster watcher feeding policies, once started.
	policyWatcher atomic.Pointer[policy.Watcher]
	policyDenied  *prometheus.CounterVec

	fallbacks     prometheus.Counter
	dialsRefused  prometheus.Counter
	noTransparent atomic.Bool // IP_TRANSPARENT found not permitted

	outRefused *prometheus.CounterVec
	viaGateway *prometheus.CounterVec
	network    string          // this proxy's, sent through gateways
	conns      connLog         // /debug/connections
	model      model.Interface // nil: mesh CIDRs decide, as without a cluster
	source     model.Source

	mu        sync.Mutex
	workloads map[string]*workload
	seen      map[string]bool // UIDs added or kept in the current session
	synced    bool            // the current session's snapshot is complete
}

// New builds a Proxy; WithFetcher is required.
func New(opts ...Option) (*Proxy, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	p := &Proxy{opts: o, reg: prometheus.NewRegistry(), workloads: map[string]*workload{}}
	if o.fetcher == nil {
		return nil, errors.New("proxy: WithFetcher is required")
	}
	p.certs = certs.New(o.fetcher, certs.WithLogger(o.log))
	p.metrics = hbone.NewMetrics(p.reg)
	p.wlGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshctl_proxy_workloads", Help: "Pods the proxy serves."})
	p.fallbacks = prometheus.NewCounter(prometheus.CounterOpts{Name: "meshctl_proxy_source_preservation_fallbacks_total",
		Help: "Inbound connections delivered from the proxy's address instead of the client's, because IP_TRANSPARENT is not permitted."})
	p.dialsRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "meshctl_proxy_dials_refused_total",
		Help: "Dials not attempted because the workload already had its maximum of connects in progress."})
	p.outRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshctl_proxy_outbound_refused_total",
		Help: "Outbound connections refused because the service model gives them nowhere safe to go, by reason: unknown_destination (a mesh address the model does not know), unknown_service_port, no_healthy_endpoint, no_network_gateway (the only endpoints are on networks whose east-west gateway is not known)."},
		[]string{"reason"})
	p.viaGateway = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshctl_proxy_outbound_network_gateway_total",
		Help: "Outbound connections sent to an endpoint on another network through that network's east-west gateway (double HBONE), by network and result (ok, or error when the tunnel failed)."},
		[]string{"network", "result"})
	p.model, p.source = o.model, o.source
	if o.xds != nil && (o.discovery != nil || o.policyConfig != nil) {
		return nil, errors.New("proxy: WithXDS replaces WithDiscovery and WithPolicies; give one source")
	}
	if o.discovery != nil {
		p.network = o.discovery.Network
	}
	if d := o.discovery; d != nil && p.model == nil {
		var err error
		if p.model, p.source, err = d.kubeModel(o); err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
	}
	p.reg.MustRegister(p.dialsRefused, p.fallbacks, p.wlGauge, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.reg.MustRegister(p.outRefused, p.viaGateway)
	p.policies = o.policies
	if p.policies == nil && o.policyConfig != nil {
		p.policies = policy.NewStore(o.policyRootNS)
	}
	if x := o.xds; x != nil && p.model == nil {
		// After the policy store is settled: the source feeds this one.
		if p.policies == nil {
			p.policies = policy.NewStore(x.RootNamespace)
		}
		src, err := newXDSSource(*x, p.policies, o.log)
		if err != nil {
			return nil, err
		}
		p.model, p.source, p.network = model.New(x.Cluster, x.Network), src, x.Network
	}
	p.newPolicyMetrics()
	return p, nil
}

// Run builds a Proxy from opts and runs it until ctx ends; it is the entry
// point the meshctl binary calls for the node proxy.
func Run(ctx context.Context, opts ...Option) error {
	p, err := New(opts...)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

// Run serves admin, metrics and readiness and consumes workload events until
// ctx ends, then removes every workload.
func (p *Proxy) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	servers := []struct {
		addr string
		h    http.Handler
	}{
		{p.opts.adminAddr, p.adminHandler()},
		{p.opts.metricsAddr, p.metricsHandler()},
		{p.opts.readyAddr, p.readyHandler()},
	}
	for _, s := range servers {
		if s.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return fmt.Errorf("proxy: listen %s: %w", s.addr, err)
		}
		srv := &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second}
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.Serve(ln) }()
		context.AfterFunc(ctx, func() { _ = srv.Close() })
	}
	defer wg.Wait()
	if p.source != nil {
		wg.Add(1)
		go func() { defer wg.Done(); p.runSource(ctx) }()
	}
	stopPolicies, err := p.startPolicies(ctx)
	if err != nil {
		return err
	}
	defer stopPolicies()
	defer p.removeAll()
	defer p.certs.Close()
	if p.opts.events == nil {
		p.ready.Store(true)
		<-ctx.Done()
		return nil
	}
	var backoff reconnectBackoff
	for {
		p.beginSession()
		err := p.opts.events.Run(ctx, func(ev WorkloadEvent) error { return p.handle(ctx, ev) })
		if ctx.Err() != nil {
			return nil
		}
		if p.sessionSynced() {
			backoff.reset()
		}
		// The agent restarted or the socket broke: keep serving what we
		// have and reconcile against the next snapshot.
		wait := backoff.next()
		p.opts.log.Warn("workload events ended; reconnecting", "err", err, "retry", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (p *Proxy) beginSession() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = map[string]bool{}
	p.synced = false
}

// sessionSynced reports whether the last session delivered a whole snapshot.
func (p *Proxy) sessionSynced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.synced
}

func (p *Proxy) handle(ctx context.Context, ev WorkloadEvent) error {
	p.opts.log.Debug("workload event", "kind", ev.Kind.String(), "uid", ev.UID, "pod", ev.Namespace+"/"+ev.Name)
	switch ev.Kind {
	case EventAdd:
		return p.addWorkload(ctx, ev)
	case EventKeep:
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, ok := p.workloads[ev.UID]; !ok {
			// The agent lost the pod's netns (its restart) and so did we
			// (ours): nothing to keep. ztunnel acks this too; a refusal
			// would only fill istio-cni's log with ack errors.
			p.opts.log.Debug("keep of a workload this proxy does not serve", "uid", ev.UID)
			return nil
		}
		p.seen[ev.UID] = true
		return nil
	case EventDel:
		p.removeWorkload(ev.UID)
		return nil
	case EventSnapshotSent:
		p.mu.Lock()
		var stale []string
		for uid := range p.workloads {
			if !p.seen[uid] {
				stale = append(stale, uid)
			}
		}
		p.mu.Unlock()
		for _, uid := range stale {
			p.opts.log.Info("removing workload missing from snapshot", "uid", uid)
			p.removeWorkload(uid)
		}
		p.mu.Lock()
		p.synced = true
		p.mu.Unlock()
		p.ready.Store(true)
		return nil
	}
	return fmt.Errorf("unknown workload event %d", ev.Kind)
}

// runSource feeds the model until ctx ends, restarting the source when it
// fails (an API server that went away comes back).
func (p *Proxy) runSource(ctx context.Context) { runSource(ctx, p.source, p.model, p.opts.log) }

func runSource(ctx context.Context, source model.Source, sink model.Sink, log *slog.Logger) {
	backoff := time.Second
	for {
		err := source.Run(ctx, sink)
		if ctx.Err() != nil {
			return
		}
		log.Warn("service model source ended; restarting", "err", err, "retry", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// outRoute is how one outbound connection travels.
type outRoute struct {
	hbone bool
	// target is where the connection goes: the tunnel's :authority, or
	// the plain TCP destination.
	target  netip.AddrPort
	gateway netip.AddrPort    // hbone: where the tunnel goes
	peer    identity.Identity // hbone: the server's required identity
	refuse  string            // non-empty: refused, for this reason
	// double is set for an endpoint on another network: gateway and peer
	// are then its east-west gateway's, network its network.
	double  *hbone.Double
	network string
}

// defaultLearnWait bounds the wait for the model to learn a new mesh
// address: a pod that just started (a client connecting to a server that
// became Ready a moment ago) reaches this node's informers a little after
// it reaches the client, across clusters a little later still. ztunnel
// fetches such a workload on demand for the same reason.
const defaultLearnWait = 3 * time.Second

// resolve decides how an outbound connection to dst travels. A mesh address
// the model does not know yet is looked up again for a while before it is
// refused (learnWait).
func (p *Proxy) resolve(ctx context.Context, dst netip.AddrPort) outRoute {
	r := p.resolveNow(dst)
	if r.refuse != model.NotFound.String() || p.opts.learnWait <= 0 {
		return r
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(p.opts.learnWait)
	for {
		select {
		case <-ctx.Done():
			return r
		case <-deadline:
			return r
		case <-tick.C:
			if r = p.resolveNow(dst); r.refuse != model.NotFound.String() {
				return r
			}
		}
	}
}

// resolveNow is resolve by what the model knows now.
func (p *Proxy) resolveNow(dst netip.AddrPort) outRoute {
	if p.opts.resolve != nil {
		if r, ok := p.opts.resolve(dst); ok {
			return outRoute{hbone: true, target: dst, gateway: r.Gateway, peer: r.Identity}
		}
	}
	inMesh := false
	for _, pfx := range p.opts.meshCIDRs {
		if pfx.Contains(dst.Addr()) {
			inMesh = true
			break
		}
	}
	if p.model == nil {
		if inMesh {
			return outRoute{hbone: true, target: dst, gateway: netip.AddrPortFrom(dst.Addr(), ambient.PortHBONE)}
		}
		return outRoute{target: dst}
	}
	up, res := p.model.Resolve(dst)
	switch {
	case res == model.Found && up.Gateway.IsValid():
		return outRoute{hbone: true, target: up.Addr, gateway: up.Gateway, peer: up.GatewayIdentity, network: up.GatewayNetwork,
			double: &hbone.Double{
				Authority: up.Hostname + ":" + strconv.Itoa(int(up.ServicePort)),
				Peers:     up.Identities, Network: p.network,
			}}
	case res == model.Found && up.HBONE:
		return outRoute{hbone: true, target: up.Addr, gateway: netip.AddrPortFrom(up.Addr.Addr(), ambient.PortHBONE), peer: up.Identity}
	case res == model.Found:
		return outRoute{target: up.Addr}
	case res == model.NotFound && !inMesh:
		return outRoute{target: dst}
	}
	return outRoute{refuse: res.String()}
}
