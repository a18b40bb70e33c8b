package hbone

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/hbone/internal/h2tun"
)

// Target describes one tunnel to open.
type Target struct {
	// Source is the identity whose certificate the tunnel presents.
	Source identity.Identity
	// SourceAddr is the original source, sent as `forwarded: for=`.
	SourceAddr netip.Addr
	// Gateway is where the HBONE connection goes: the destination pod's
	// ip:15008, or an east-west gateway.
	Gateway netip.AddrPort
	// Destination is the original destination, sent as :authority.
	Destination netip.AddrPort
	// Peer is the identity the server must prove; zero accepts any identity
	// in the trust domain (used when the destination's identity is unknown).
	Peer identity.Identity
	// Baggage is sent as the `baggage` header when set.
	Baggage string
	// Double, when set, makes this double HBONE, as ztunnel reaches a
	// workload on another network: Gateway and Peer are that network's
	// east-west gateway and its identity, and Destination is unused.
	Double *Double
}

// Double is the inner half of a double-HBONE tunnel: the outer CONNECT
// goes to the gateway, which picks an endpoint of the service and splices
// the stream to that endpoint's proxy unread; inside it a second mutual
// TLS connection, end to end with that proxy, carries the inner CONNECT.
type Double struct {
	// Authority names the service, host:port, in both CONNECTs: the
	// gateway picks an endpoint by it, the endpoint's proxy maps the
	// service port to its target port.
	Authority string
	// Peers are the identities the inner server may prove: those of the
	// service's endpoints behind the gateway. Empty refuses every server.
	Peers []identity.Identity
	// Network is this proxy's network, sent as x-forwarded-network on the
	// inner CONNECT (ztunnel's sign that it came through a gateway).
	Network string
}

// errNoPeers is a double-HBONE target that names no acceptable identity.
var errNoPeers = errors.New("no identity to require of the server behind the gateway")

// statusError is a CONNECT refused by the server.
type statusError struct{ Code int }

func (e *statusError) Error() string {
	return fmt.Sprintf("hbone CONNECT refused: %d %s", e.Code, http.StatusText(e.Code))
}

// Dialer opens HBONE tunnels, pooling h2 connections per (source identity,
// gateway, expected peer): a new tunnel is a new stream, not a new handshake.
type Dialer struct {
	cfg     config
	mu      sync.Mutex
	pool    map[poolKey][]*h2tun.Conn
	dialing map[poolKey]chan struct{} // closed when the dial in progress ends
	probing map[*h2tun.Conn]struct{}  // connections being pinged after a CONNECT timed out
}

type poolKey struct {
	source, peer identity.Identity
	gateway      netip.AddrPort
}

// NewDialer returns a Dialer; WithClientCertificates and WithRoots are required.
func NewDialer(opts ...Option) (*Dialer, error) {
	cfg := newConfig(opts)
	if cfg.certForID == nil || cfg.roots == nil {
		return nil, errors.New("hbone dialer: WithClientCertificates and WithRoots are required")
	}
	return &Dialer{cfg: cfg, pool: map[poolKey][]*h2tun.Conn{}, dialing: map[poolKey]chan struct{}{}, probing: map[*h2tun.Conn]struct{}{}}, nil
}

// Close closes every pooled connection; tunnels on them are reset.
func (d *Dialer) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, ccs := range d.pool {
		for _, cc := range ccs {
			_ = cc.Close()
		}
		delete(d.pool, k)
	}
	return nil
}

// PoolSize returns the number of live pooled h2 connections.
func (d *Dialer) PoolSize() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for k := range d.pool {
		n += len(d.pruneLocked(k))
	}
	return n
}

// pruneLocked drops k's connections that can take no new stream (closed or
// draining after GOAWAY) and returns the rest.
func (d *Dialer) pruneLocked(k poolKey) []*h2tun.Conn {
	ccs := d.pool[k][:0]
	for _, cc := range d.pool[k] {
		if cc.Usable() {
			ccs = append(ccs, cc)
		}
	}
	if len(ccs) == 0 {
		delete(d.pool, k)
		return nil
	}
	d.pool[k] = ccs
	return ccs
}

// clientConn returns a pooled connection with a stream slot reserved for the
// caller, dialing a new one when every pooled connection is full. Only one
// dial per key runs at a time: a burst of new tunnels waits for it instead of
// opening a connection each, which is the point of the pool.
func (d *Dialer) clientConn(ctx context.Context, t Target) (*h2tun.Conn, error) {
	k := poolKey{source: t.Source, peer: t.Peer, gateway: t.Gateway}
	for {
		d.mu.Lock()
		for _, cc := range d.pruneLocked(k) {
			if cc.Reserve() {
				d.mu.Unlock()
				return cc, nil
			}
		}
		if wait, ok := d.dialing[k]; ok {
			d.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("hbone dial %s: %w", t.Gateway, ctx.Err())
			}
		}
		done := make(chan struct{})
		d.dialing[k] = done
		d.mu.Unlock()

		cc, err := d.dialConn(ctx, t)
		d.mu.Lock()
		delete(d.dialing, k)
		close(done)
		if err == nil {
			d.pool[k] = append(d.pool[k], cc)
		}
		d.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if cc.Reserve() {
			return cc, nil
		}
	}
}

// dialConn opens a new h2 connection to t's gateway.
func (d *Dialer) dialConn(ctx context.Context, t Target) (*h2tun.Conn, error) {
	tc, bc, err := d.handshake(ctx, t)
	if err != nil {
		return nil, err
	}
	m := d.cfg.metrics
	cc, err := h2tun.NewClient(tc, h2tun.Config{
		StreamWindow:         defaultStreamWindow,
		ConnWindow:           defaultConnWindow,
		MaxReadFrameSize:     clientMaxReadFrameSize,
		MaxConcurrentStreams: uint32(d.cfg.streamsPerConn),
		IdleTimeout:          d.cfg.poolIdleTimeout,
		StallTimeout:         d.cfg.limits.StallTimeout,
		CountError:           func(kind string) { m.h2Errors.WithLabelValues(kind).Inc() },
		// Keeps the pool gauge honest however the connection ends (idle
		// timeout, GOAWAY, error, Close).
		OnClose: func() { m.poolConns.Dec() },
		Batch:   bc,
		// The row without inline delivery keeps the hand-off to the
		// Read's goroutine too.
		NoLead: d.cfg.noInline,
	})
	if err != nil {
		return nil, fmt.Errorf("hbone h2 with %s: %w", t.Gateway, err)
	}
	m.poolConns.Inc()
	m.poolDialed.Inc()
	return cc, nil
}

// handshake opens the mutual TLS connection to t's gateway.
func (d *Dialer) handshake(ctx context.Context, t Target) (*tls.Conn, *batchConn, error) {
	cert, err := d.cfg.certForID(ctx, t.Source)
	if err != nil {
		return nil, nil, fmt.Errorf("hbone dial %s: certificate for %s: %w", t.Gateway, t.Source, err)
	}
	raw, err := d.cfg.dial(ctx, "tcp", t.Gateway.String())
	if err != nil {
		return nil, nil, fmt.Errorf("hbone dial %s: %w", t.Gateway, err)
	}
	bc := newBatchConn(raw)
	tc := tls.Client(bc, &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{"h2"},
		// The server is authenticated by SPIFFE identity, not by host name,
		// so Go's name check is replaced by VerifyConnection below.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := identity.Verify(rawCerts(cs.PeerCertificates), d.cfg.roots(), d.cfg.trustDomain, t.Peer, d.cfg.now())
			return err
		},
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		reason := "tls"
		if errors.Is(err, identity.ErrWrongPeer) {
			reason = "peer_identity" // secure naming: the server is not who the destination is
		}
		d.cfg.metrics.handshake.WithLabelValues("outbound", reason).Inc()
		return nil, nil, fmt.Errorf("hbone handshake with %s: %w", t.Gateway, err)
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		_ = raw.Close()
		d.cfg.metrics.handshake.WithLabelValues("outbound", "alpn").Inc()
		return nil, nil, fmt.Errorf("hbone handshake with %s: peer did not negotiate h2", t.Gateway)
	}
	return tc, bc, nil
}

// connect opens a CONNECT stream to t and waits for its 200, at most the
// connect timeout. A stream the server refused unprocessed (REFUSED_STREAM,
// GOAWAY) is retried: on a busy connection the server may still count a
// stream the client already closed.
func (d *Dialer) connect(ctx context.Context, t Target) (*h2tun.Stream, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, d.cfg.connectTimeout, errConnectTimeout)
	defer cancel()
	authority := t.Destination.String()
	if t.Double != nil {
		authority = t.Double.Authority
	}
	fields := d.headerFields(t)
	for attempt := 0; ; attempt++ {
		cc, err := d.clientConn(ctx, t)
		if err != nil {
			return nil, err
		}
		st, status, err := cc.Connect(ctx, authority, fields)
		if errors.Is(err, h2tun.ErrRefused) && attempt < 3 {
			continue
		}
		if errors.Is(err, errConnectTimeout) {
			d.probe(cc)
		}
		if err != nil {
			return nil, fmt.Errorf("hbone CONNECT %s via %s: %w", authority, t.Gateway, err)
		}
		if status != http.StatusOK {
			st.Close()
			return nil, fmt.Errorf("hbone CONNECT %s via %s: %w", authority, t.Gateway, &statusError{Code: status})
		}
		return st, nil
	}
}

// errConnectTimeout is a CONNECT that got no answer in the connect timeout.
// It is a deadline error, as the context's own would be.
var errConnectTimeout = fmt.Errorf("no answer to CONNECT within the connect timeout: %w", context.DeadlineExceeded)

// probe pings cc, unless a probe of it is already running, and closes it
// if the ack does not come in time. Without this, a peer gone without a
// FIN (its node stopped, its pod's network torn down first) leaves a
// connection the pool keeps handing out: every tunnel on it waits the
// connect timeout, none fails the write that would reveal it, and the TCP
// retransmission timeout that finally would is about 15 minutes away.
func (d *Dialer) probe(cc *h2tun.Conn) {
	d.mu.Lock()
	if _, ok := d.probing[cc]; ok {
		d.mu.Unlock()
		return
	}
	d.probing[cc] = struct{}{}
	d.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.pingTimeout)
		err := cc.Ping(ctx)
		cancel()
		if err != nil && cc.Usable() {
			d.cfg.metrics.h2Errors.WithLabelValues("ping_timeout").Inc()
			d.cfg.log.Debug("hbone: closing a pooled connection that does not answer PING", "err", err)
			_ = cc.Close()
		}
		d.mu.Lock()
		delete(d.probing, cc)
		d.mu.Unlock()
	}()
}

// headerFields are the CONNECT request's regular fields, as ztunnel sends them.
func (d *Dialer) headerFields(t Target) []hpack.HeaderField {
	f := make([]hpack.HeaderField, 0, 3)
	if t.SourceAddr.IsValid() {
		f = append(f, hpack.HeaderField{Name: "forwarded", Value: forwardedFor(t.SourceAddr)})
	}
	if t.Baggage != "" {
		f = append(f, hpack.HeaderField{Name: "baggage", Value: t.Baggage})
	}
	return append(f, hpack.HeaderField{Name: "traceparent", Value: newTraceparent()})
}

// newTraceparent starts a W3C trace for the tunnel, as ztunnel does, so
// tunnels can be correlated across both proxies' logs.
func newTraceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// Proxy tunnels an accepted downstream connection to t and returns when both
// directions have finished. FINs and resets are carried across: a downstream
// FIN ends the request stream, a stream end half-closes downstream, and an
// abort on either side resets the other. Each direction is copied by one
// goroutine straight from socket reads into DATA frames and from the
// stream's buffer (or, inline, from the connection's reader) into socket
// writes.
func (d *Dialer) Proxy(ctx context.Context, t Target, downstream net.Conn) error {
	var st *h2tun.Stream
	var err error
	if t.Double != nil {
		var end func()
		st, end, err = d.connectDouble(ctx, t)
		if err != nil {
			return err
		}
		defer end()
	} else {
		st, err = d.connect(ctx, t)
		if err != nil {
			return err
		}
	}
	defer st.Close()
	d.cfg.metrics.opened.WithLabelValues("outbound").Inc()
	defer d.cfg.metrics.closed.WithLabelValues("outbound").Inc()
	stop := context.AfterFunc(ctx, func() { st.Reset(http2.ErrCodeCancel); reset(downstream) })
	defer stop()

	done := make(chan struct{})
	go func() {
		defer close(done)
		err, writeFailed := splice(st, downstream, d.cfg.metrics.sent.WithLabelValues("outbound"))
		switch {
		case writeFailed: // the stream is gone; the other direction resets downstream
		case errors.Is(err, io.EOF):
			_ = st.CloseWrite()
		default: // downstream aborted
			st.Reset(http2.ErrCodeCancel)
		}
	}()
	received := d.cfg.metrics.received.WithLabelValues("outbound")
	if !d.cfg.noInline {
		setSink(st, downstream, received)
	}
	rerr, writeFailed := splice(withStall(downstream, d.cfg.limits.StallTimeout), st, received)
	switch {
	case writeFailed: // downstream is gone; abort the stream
		st.Reset(http2.ErrCodeCancel)
		reset(downstream)
	case errors.Is(rerr, io.EOF):
		closeWrite(downstream)
	default: // stream reset by the peer
		reset(downstream)
	}
	<-done
	_ = downstream.Close()
	if rerr != nil && !errors.Is(rerr, io.EOF) {
		return fmt.Errorf("hbone tunnel to %s: %w", t.Destination, rerr)
	}
	return nil
}

// connectDouble opens t's outer tunnel to the gateway (pooled, as any
// tunnel to it), a TLS connection inside it to the proxy of the endpoint
// the gateway picked, verified against t.Double.Peers, and on that an h2
// connection of its own with one CONNECT stream — not pooled, as in
// ztunnel: each new connection must let the gateway pick an endpoint
// anew. end releases all of it.
func (d *Dialer) connectDouble(ctx context.Context, t Target) (*h2tun.Stream, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.connectTimeout)
	defer cancel()
	if len(t.Double.Peers) == 0 {
		return nil, nil, fmt.Errorf("hbone CONNECT %s via %s: %w", t.Double.Authority, t.Gateway, errNoPeers)
	}
	cert, err := d.cfg.certForID(ctx, t.Source)
	if err != nil {
		return nil, nil, fmt.Errorf("hbone CONNECT %s: certificate for %s: %w", t.Double.Authority, t.Source, err)
	}
	outer, err := d.connect(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	peers := t.Double.Peers
	tc := tls.Client(&outerConn{st: outer}, &tls.Config{
		MinVersion:         tls.VersionTLS13,
		NextProtos:         []string{"h2"},
		InsecureSkipVerify: true, // SPIFFE identities, checked below
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := identity.Verify(rawCerts(cs.PeerCertificates), d.cfg.roots(), d.cfg.trustDomain, identity.Identity{}, d.cfg.now())
			if err != nil {
				return err
			}
			if !slices.Contains(peers, id) {
				return fmt.Errorf("%w: peer is %s, want one of %v", identity.ErrWrongPeer, id, peers)
			}
			return nil
		},
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		outer.Close()
		reason := "tls"
		if errors.Is(err, identity.ErrWrongPeer) {
			reason = "peer_identity"
		}
		d.cfg.metrics.handshake.WithLabelValues("outbound", reason).Inc()
		return nil, nil, fmt.Errorf("hbone handshake with %s via %s: %w", t.Double.Authority, t.Gateway, err)
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		outer.Close()
		d.cfg.metrics.handshake.WithLabelValues("outbound", "alpn").Inc()
		return nil, nil, fmt.Errorf("hbone handshake with %s via %s: peer did not negotiate h2", t.Double.Authority, t.Gateway)
	}
	m := d.cfg.metrics
	cc, err := h2tun.NewClient(tc, h2tun.Config{
		StreamWindow:         defaultStreamWindow,
		ConnWindow:           defaultConnWindow,
		MaxReadFrameSize:     clientMaxReadFrameSize,
		MaxConcurrentStreams: 1,
		CountError:           func(kind string) { m.h2Errors.WithLabelValues(kind).Inc() },
	})
	if err != nil {
		outer.Close()
		return nil, nil, fmt.Errorf("hbone h2 with %s via %s: %w", t.Double.Authority, t.Gateway, err)
	}
	end := func() { _ = cc.Close(); outer.Close() }
	fields := d.headerFields(t)
	if t.Double.Network != "" {
		fields = append(fields, hpack.HeaderField{Name: "x-forwarded-network", Value: t.Double.Network})
	}
	if !cc.Reserve() {
		end()
		return nil, nil, fmt.Errorf("hbone CONNECT %s via %s: inner connection refused a stream", t.Double.Authority, t.Gateway)
	}
	st, status, err := cc.Connect(ctx, t.Double.Authority, fields)
	if err != nil {
		end()
		return nil, nil, fmt.Errorf("hbone inner CONNECT %s via %s: %w", t.Double.Authority, t.Gateway, err)
	}
	if status != http.StatusOK {
		st.Close()
		end()
		return nil, nil, fmt.Errorf("hbone inner CONNECT %s via %s: %w", t.Double.Authority, t.Gateway, &statusError{Code: status})
	}
	return st, end, nil
}

// outerConn is the outer stream of a double-HBONE tunnel as the net.Conn
// the inner TLS runs on. Deadlines are not supported (see streamConn);
// the inner handshake is bounded by its context instead.
type outerConn struct {
	st *h2tun.Stream
}

func (c *outerConn) Read(p []byte) (int, error)       { return c.st.Read(p) }
func (c *outerConn) Write(p []byte) (int, error)      { return c.st.Write(p) }
func (c *outerConn) CloseWrite() error                { return c.st.CloseWrite() }
func (c *outerConn) Close() error                     { c.st.Close(); return nil }
func (c *outerConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *outerConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *outerConn) SetDeadline(time.Time) error      { return errors.ErrUnsupported }
func (c *outerConn) SetReadDeadline(time.Time) error  { return errors.ErrUnsupported }
func (c *outerConn) SetWriteDeadline(time.Time) error { return errors.ErrUnsupported }

// Dial opens a tunnel and returns it as a net.Conn, for callers that are not
// splicing an accepted socket (interop tests, benchmarks, tools).
func (d *Dialer) Dial(ctx context.Context, t Target) (net.Conn, error) {
	st, err := d.connect(ctx, t)
	if err != nil {
		return nil, err
	}
	d.cfg.metrics.opened.WithLabelValues("outbound").Inc()
	return &streamConn{st: st, metrics: d.cfg.metrics,
		local: net.TCPAddrFromAddrPort(netip.AddrPortFrom(t.SourceAddr, 0)), remote: net.TCPAddrFromAddrPort(t.Destination)}, nil
}

// streamConn is a tunnel as a net.Conn. Deadlines are not supported: the
// tunnel is a stream on a shared connection, and its lifetime is bounded by
// Close and the pool's idle timeout instead.
type streamConn struct {
	st            *h2tun.Stream
	metrics       *Metrics
	local, remote net.Addr
	once          sync.Once
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.st.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.st.Write(p) }

// CloseWrite half-closes the tunnel: the server sees EOF from its upstream read.
func (c *streamConn) CloseWrite() error { return c.st.CloseWrite() }

func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.st.Close()
		c.metrics.closed.WithLabelValues("outbound").Inc()
	})
	return nil
}
func (c *streamConn) LocalAddr() net.Addr              { return c.local }
func (c *streamConn) RemoteAddr() net.Addr             { return c.remote }
func (c *streamConn) SetDeadline(time.Time) error      { return errors.ErrUnsupported }
func (c *streamConn) SetReadDeadline(time.Time) error  { return errors.ErrUnsupported }
func (c *streamConn) SetWriteDeadline(time.Time) error { return errors.ErrUnsupported }
