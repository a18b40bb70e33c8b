package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/hbone"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/podnet"
)

// workload is one pod the proxy serves: its namespace, identity, listeners.
type workload struct {
	uid, name, namespace, serviceAccount string
	id                                   identity.Identity
	ns                                   *podnet.Namespace
	addrs                                []netip.Addr
	listeners                            [3]net.Listener // outbound, inbound, hbone
	dialer                               *hbone.Dialer
	dialSlots                            chan struct{} // semaphore: withWorkloadLimits
	cancel                               context.CancelFunc
	wg                                   sync.WaitGroup
}

func (p *Proxy) addWorkload(ctx context.Context, ev WorkloadEvent) error {
	p.mu.Lock()
	if old, ok := p.workloads[ev.UID]; ok {
		p.mu.Unlock()
		same, err := sameNetns(old.ns, ev.Netns)
		if err != nil {
			if ev.Netns != nil {
				_ = ev.Netns.Close()
			}
			return fmt.Errorf("add workload %s/%s: %w", ev.Namespace, ev.Name, err)
		}
		if same {
			// A re-sent pod (new snapshot after an agent restart): keep
			// the listeners we have; the duplicate fd is not needed.
			p.mu.Lock()
			p.seen[ev.UID] = true
			p.mu.Unlock()
			if ev.Netns != nil {
				_ = ev.Netns.Close()
			}
			return nil
		}
		// The pod's sandbox was recreated (same UID, new netns): the old
		// listeners serve a namespace nothing routes to any more.
		p.opts.log.Info("workload netns changed; rebuilding its listeners", "pod", ev.Namespace+"/"+ev.Name, "uid", ev.UID)
		p.removeWorkload(ev.UID)
	} else {
		p.mu.Unlock()
	}
	if ev.UID == "" || ev.Namespace == "" || ev.ServiceAccount == "" {
		if ev.Netns != nil {
			_ = ev.Netns.Close()
		}
		return fmt.Errorf("add workload %q: uid, namespace and service account are required", ev.UID)
	}
	w := &workload{
		uid: ev.UID, name: ev.Name, namespace: ev.Namespace, serviceAccount: ev.ServiceAccount,
		id:        identity.New(p.opts.trustDomain, ev.Namespace, ev.ServiceAccount),
		dialSlots: make(chan struct{}, p.opts.maxDials),
	}
	if ev.Netns != nil {
		w.ns = podnet.New(ev.Netns)
	}
	if err := p.startWorkload(ctx, w); err != nil {
		w.close()
		p.certs.Untrack(w.id, w.uid)
		return fmt.Errorf("add workload %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	p.mu.Lock()
	p.workloads[w.uid] = w
	if p.seen != nil {
		p.seen[w.uid] = true
	}
	p.wlGauge.Set(float64(len(p.workloads)))
	p.mu.Unlock()
	p.opts.log.Info("workload added", "pod", w.namespace+"/"+w.name, "uid", w.uid, "identity", w.id.String(), "addrs", w.addrs)
	return nil
}

// sameNetns reports whether f refers to the namespace ns holds.
func sameNetns(ns *podnet.Namespace, f *os.File) (bool, error) {
	a, err := ns.ID()
	if err != nil {
		return false, err
	}
	b, err := podnet.FileID(f)
	if err != nil {
		return false, err
	}
	return a == b, nil
}

func (p *Proxy) startWorkload(ctx context.Context, w *workload) error {
	addrs, err := w.ns.Addrs()
	if err != nil {
		return err
	}
	w.addrs = addrs
	p.certs.Track(w.id, certs.Pod{Namespace: w.namespace, Name: w.name, UID: w.uid})

	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		release, err := p.dialSlot(w)
		if err != nil {
			return nil, err
		}
		defer release()
		return w.ns.DialContext(ctx, &net.Dialer{Control: hbone.MarkControl(p.opts.mark)}, network, addr)
	}
	common := append([]hbone.Option{
		hbone.WithTrustDomain(p.opts.trustDomain),
		hbone.WithRoots(p.certs.Roots),
		hbone.WithMetrics(p.metrics),
		hbone.WithLogger(p.opts.log),
		hbone.WithDialContext(dial),
	}, p.opts.hboneOptions...)
	if p.model != nil {
		// Tunnels a network gateway forwards name the service, not the
		// pod: the model maps the service port to this pod's.
		common = append(common, hbone.WithHostAuthority(p.model.InboundTarget))
	}
	w.dialer, err = hbone.NewDialer(append(common, hbone.WithClientCertificates(p.certs.Certificate))...)
	if err != nil {
		return err
	}
	server, err := hbone.NewServer(append(common,
		hbone.WithServerCertificates(func(ctx context.Context, dst netip.Addr) (*tls.Certificate, error) {
			return p.certForIP(ctx, w, dst)
		}),
		hbone.WithUpstreamDialer(func(ctx context.Context, src netip.Addr, dst netip.AddrPort) (net.Conn, error) {
			return p.dialUpstream(ctx, w, src, dst)
		}),
		hbone.WithAuthorizer(func(_ context.Context, peer identity.Identity, src, dst netip.AddrPort) error {
			err := p.authorize(w, "hbone", peer, src.Addr(), dst)
			p.conns.add(connRecord{Direction: "inbound", HBONE: true, Pod: w.namespace + "/" + w.name, Identity: w.id.String(),
				Src: src, Dst: dst, Peer: peer.String(), Error: errString(err)})
			return err
		}))...)
	if err != nil {
		return err
	}
	for i, port := range p.opts.ports {
		// Listen on the wildcard: REDIRECT rewrites the destination to the
		// address of the interface the packet came in on.
		ln, err := w.ns.Listen(ctx, &net.ListenConfig{}, "tcp", net.JoinHostPort("", strconv.Itoa(port)))
		if err != nil {
			return err
		}
		w.listeners[i] = ln
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.wg.Add(3)
	go func() { defer w.wg.Done(); p.acceptLoop(wctx, w, w.listeners[0], p.outbound) }()
	go func() { defer w.wg.Done(); p.acceptLoop(wctx, w, w.listeners[1], p.inboundPlaintext) }()
	go func() { defer w.wg.Done(); _ = server.Serve(wctx, w.listeners[2]) }()
	return nil
}

// certForIP picks the certificate of the workload that owns dst; a listener
// in a pod's namespace falls back to that pod (its address may not be known,
// e.g. on loopback in tests).
func (p *Proxy) certForIP(ctx context.Context, self *workload, dst netip.Addr) (*tls.Certificate, error) {
	p.mu.Lock()
	owner := self
	for _, w := range p.workloads {
		for _, a := range w.addrs {
			if a == dst {
				owner = w
			}
		}
	}
	p.mu.Unlock()
	return p.certs.Certificate(ctx, owner.id)
}

var errTooManyDials = errors.New("too many connects in progress for this workload")

// dialSlot takes one of w's connect slots, or fails at once when none is
// free: a pod dialing a black hole gets resets, not an ever longer queue.
func (p *Proxy) dialSlot(w *workload) (release func(), err error) {
	select {
	case w.dialSlots <- struct{}{}:
		return func() { <-w.dialSlots }, nil
	default:
		p.dialsRefused.Inc()
		return nil, errTooManyDials
	}
}

func (p *Proxy) acceptLoop(ctx context.Context, w *workload, ln net.Listener, handle func(context.Context, *workload, net.Conn)) {
	context.AfterFunc(ctx, func() { _ = ln.Close() })
	var conns sync.WaitGroup
	defer conns.Wait()
	slots := make(chan struct{}, p.opts.maxConns)
	for {
		// Accept only with a free slot: past the cap, connections wait in
		// the kernel's backlog instead of costing goroutines and sockets.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		c, err := ln.Accept()
		if err != nil {
			<-slots
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			defer func() { <-slots }()
			stop := context.AfterFunc(ctx, func() { _ = c.Close() })
			defer stop()
			handle(ctx, w, c)
		}()
	}
}

// outbound handles a connection captured by the pod's OUTPUT REDIRECT.
func (p *Proxy) outbound(ctx context.Context, w *workload, c net.Conn) {
	defer c.Close()
	dst, err := originalDst(c)
	if err != nil {
		p.opts.log.Debug("outbound without original destination", "src", c.RemoteAddr(), "err", err)
		return
	}
	if dst == addrPort(c.LocalAddr()) {
		return // a direct connection to 15001 would loop forever
	}
	route := p.resolve(ctx, dst)
	rec := connRecord{Pod: w.namespace + "/" + w.name, Identity: w.id.String(), Src: addrPort(c.RemoteAddr()), Dst: dst, Target: route.target}
	switch {
	case route.refuse != "":
		p.outRefused.WithLabelValues(route.refuse).Inc()
		p.opts.log.Debug("outbound refused", "pod", w.namespace+"/"+w.name, "dst", dst, "reason", route.refuse)
		rec.Direction, rec.Error = directionOutboundRefused, route.refuse
		p.conns.add(rec)
		resetConn(c)
		return
	case !route.hbone:
		rec.Direction = "outbound_passthrough"
		p.conns.add(rec)
		p.passthrough(ctx, w, c, route.target, "outbound_passthrough", netip.Addr{})
		return
	}
	rec.Direction, rec.HBONE = "outbound", true
	if !route.peer.IsZero() {
		rec.Peer = route.peer.String()
	}
	if route.double != nil {
		// The gateway picks the endpoint: the record names the service
		// and the identities its endpoints there may prove.
		rec.Target, rec.Gateway, rec.Authority = netip.AddrPort{}, route.gateway, route.double.Authority
		ids := make([]string, len(route.double.Peers))
		for i, id := range route.double.Peers {
			ids[i] = id.String()
		}
		rec.Peer = strings.Join(ids, ",")
	}
	failed := p.conns.add(rec)
	src := addrPort(c.RemoteAddr()).Addr()
	err = w.dialer.Proxy(ctx, hbone.Target{
		Source: w.id, SourceAddr: src, Gateway: route.gateway, Destination: route.target, Peer: route.peer,
		Baggage: "k8s.namespace.name=" + w.namespace + ",k8s.pod.name=" + w.name,
		Double:  route.double,
	}, c)
	failed(err)
	if route.double != nil {
		result := "ok"
		if err != nil {
			result = "error"
		}
		p.viaGateway.WithLabelValues(route.network, result).Inc()
	}
	if err != nil {
		p.opts.log.Debug("outbound tunnel failed", "pod", w.namespace+"/"+w.name, "dst", dst, "err", err)
		resetConn(c)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// resetConn makes the client see a reset, as with no proxy and no server.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

// inboundPlaintext handles a connection captured by the pod's PREROUTING
// REDIRECT (a non-mesh client): it is delivered to the original destination.
func (p *Proxy) inboundPlaintext(ctx context.Context, w *workload, c net.Conn) {
	defer c.Close()
	dst, err := originalDst(c)
	if err != nil || ambient.IsProxyPort(dst.Port()) {
		return
	}
	src := addrPort(c.RemoteAddr()).Addr()
	err = p.authorize(w, "plaintext", identity.Identity{}, src, dst)
	p.conns.add(connRecord{Direction: "inbound_plaintext", Pod: w.namespace + "/" + w.name, Identity: w.id.String(),
		Src: addrPort(c.RemoteAddr()), Dst: dst, Error: errString(err)})
	if err != nil {
		refuse(c)
		return
	}
	p.passthrough(ctx, w, c, dst, "inbound_plaintext", src)
}

// passthrough splices c to dst as plain TCP; src, when valid, is the client
// address to deliver from (inbound), see dialUpstream.
func (p *Proxy) passthrough(ctx context.Context, w *workload, c net.Conn, dst netip.AddrPort, direction string, src netip.Addr) {
	dctx, cancel := context.WithTimeout(ctx, hboneDialTimeout)
	up, err := p.dialUpstream(dctx, w, src, dst)
	cancel()
	if err != nil {
		p.opts.log.Debug("passthrough dial failed", "dst", dst, "err", err)
		return
	}
	defer up.Close()
	var sent, received int64
	end := p.metrics.Plain(direction)
	defer func() { end(sent, received) }()
	done := make(chan struct{})
	go func() {
		sent, _ = io.Copy(up, c)
		halfClose(up)
		close(done)
	}()
	received, _ = io.Copy(c, up)
	halfClose(c)
	<-done
}

const hboneDialTimeout = 10 * time.Second // DESIGN.md's upstream dial timeout

func halfClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

func (p *Proxy) removeWorkload(uid string) {
	p.mu.Lock()
	w, ok := p.workloads[uid]
	delete(p.workloads, uid)
	p.wlGauge.Set(float64(len(p.workloads)))
	p.mu.Unlock()
	if !ok {
		return
	}
	w.close()
	p.certs.Untrack(w.id, w.uid)
	p.opts.log.Info("workload removed", "pod", w.namespace+"/"+w.name, "uid", uid)
}

func (p *Proxy) removeAll() {
	p.mu.Lock()
	uids := make([]string, 0, len(p.workloads))
	for uid := range p.workloads {
		uids = append(uids, uid)
	}
	p.mu.Unlock()
	for _, uid := range uids {
		p.removeWorkload(uid)
	}
}

// close stops the listeners, ends the workload's connections and releases
// its namespace.
func (w *workload) close() {
	if w.cancel != nil {
		w.cancel()
	}
	for _, ln := range w.listeners {
		if ln != nil {
			_ = ln.Close()
		}
	}
	w.wg.Wait()
	if w.dialer != nil {
		_ = w.dialer.Close()
	}
	_ = w.ns.Close()
}
