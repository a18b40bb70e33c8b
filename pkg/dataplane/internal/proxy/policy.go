package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
)

// Authorization, as ztunnel enforces it: Istio's AuthorizationPolicy and
// PeerAuthentication at L4 (package policy), checked for every inbound
// tunnel on 15008 (a denial answers 401) and every plaintext connection
// captured on 15006 (a denial resets it; STRICT mTLS denies them all).
//
// The destination workload's labels select policies. ZDS carries none, so
// they come from the service model (WithDiscovery, the pod's labels;
// WithXDS, the policies istiod bound to the workload); without it, or for
// an address it does not know, the proxy uses the namespace of the pod that
// owns the address and no labels: namespace- and mesh-wide policies apply,
// selector policies do not. The proxy is not ready before the policies have
// been listed once.

func (p *Proxy) newPolicyMetrics() {
	p.policyDenied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshctl_proxy_policy_denied_total",
		Help: "Inbound connections refused by authorization policy, by transport (hbone, plaintext), reason (denied: a DENY policy matched; not_allowed: no ALLOW policy matched; strict: plaintext under STRICT mTLS) and policy (namespace/name).",
	}, []string{"transport", "reason", "policy"})
	p.reg.MustRegister(p.policyDenied)
}

// startPolicies starts the cluster watcher WithPolicies asked for.
func (p *Proxy) startPolicies(ctx context.Context) (stop func(), err error) {
	if p.opts.policyConfig == nil {
		return func() {}, nil
	}
	w, err := policy.NewWatcher(p.opts.policyConfig, p.policies, p.opts.log, 0)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	p.policyWatcher.Store(w)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	return func() { cancel(); <-done }, nil
}

// authorize checks a connection to a workload served by w; peer is zero
// for plaintext.
func (p *Proxy) authorize(w *workload, transport string, peer identity.Identity, src netip.Addr, dst netip.AddrPort) error {
	if p.policies == nil {
		return nil
	}
	c := policy.Conn{Peer: peer, Src: src.Unmap(), Dst: netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())}
	wl := p.destination(w, c.Dst.Addr())
	d := p.policies.Check(c, wl)
	if d.Allowed && len(d.DryRun) == 0 {
		return nil
	}
	policy.LogDecision(p.opts.log, d, c, wl)
	if d.Allowed {
		return nil
	}
	p.policyDenied.WithLabelValues(transport, d.Reason, d.Policy).Inc()
	if d.Policy != "" {
		return fmt.Errorf("%s by policy %s", d.Reason, d.Policy)
	}
	return fmt.Errorf("%s by policy", d.Reason)
}

// destination is the workload policies are selected for.
func (p *Proxy) destination(w *workload, dst netip.Addr) policy.Workload {
	if p.model != nil {
		// The model knows the pod's labels, which ZDS does not carry, or
		// (from istiod) the selector policies istiod bound to it.
		if ns, labels, ok := p.model.WorkloadAt(dst); ok {
			return policy.Workload{Namespace: ns, Labels: labels, Policies: p.model.BoundPoliciesAt(dst)}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range p.workloads {
		for _, a := range o.addrs {
			if a == dst {
				return policy.Workload{Namespace: o.namespace}
			}
		}
	}
	return policy.Workload{Namespace: w.namespace}
}

// refuse resets a captured connection, as ztunnel drops a denied one.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}
