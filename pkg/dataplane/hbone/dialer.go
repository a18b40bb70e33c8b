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
	"net/url"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/meshctl/meshctl/pkg/dataplane/hbone/internal/h2tun"
	"github.com/meshctl/meshctl/pkg/dataplane/identity"
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
}

// StatusError is a CONNECT refused by the server.
type StatusError struct{ Code int }

func (e *StatusError) Error() string {
	return fmt.Sprintf("hbone CONNECT refused: %d %s", e.Code, http.StatusText(e.Code))
}

// Dialer opens HBONE tunnels, pooling h2 connections per (source identity,
// gateway, expected peer): a new tunnel is a new stream, not a new handshake.
type Dialer struct {
	cfg     config
	t2      *http2.Transport
	mu      sync.Mutex
	pool    map[poolKey][]*http2.ClientConn
	tpool   map[poolKey][]*h2tun.Conn
	dialing map[poolKey]chan struct{} // closed when the dial in progress ends
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
	// The windows are set through net/http's HTTP2Config because x/net's
	// Transport has no fields for them; ConfigureTransports links the two.
	t1 := &http.Transport{
		IdleConnTimeout: cfg.poolIdleTimeout,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerConnection: defaultConnWindow,
			MaxReceiveBufferPerStream:     defaultStreamWindow,
			MaxReadFrameSize:              clientMaxReadFrameSize,
		},
	}
	t2, err := http2.ConfigureTransports(t1)
	if err != nil {
		return nil, fmt.Errorf("hbone dialer: configure h2: %w", err)
	}
	t2.IdleConnTimeout = cfg.poolIdleTimeout
	t2.MaxReadFrameSize = clientMaxReadFrameSize
	return &Dialer{cfg: cfg, t2: t2, pool: map[poolKey][]*http2.ClientConn{}, tpool: map[poolKey][]*h2tun.Conn{}, dialing: map[poolKey]chan struct{}{}}, nil
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
	for k, ccs := range d.tpool {
		for _, cc := range ccs {
			_ = cc.Close()
		}
		delete(d.tpool, k)
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
	for k := range d.tpool {
		n += len(d.pruneTunLocked(k))
	}
	return n
}

func (d *Dialer) pruneLocked(k poolKey) []*http2.ClientConn {
	ccs := d.pool[k][:0]
	for _, cc := range d.pool[k] {
		if st := cc.State(); !st.Closed && !st.Closing {
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
func (d *Dialer) clientConn(ctx context.Context, t Target) (*http2.ClientConn, error) {
	k := poolKey{source: t.Source, peer: t.Peer, gateway: t.Gateway}
	for {
		d.mu.Lock()
		for _, cc := range d.pruneLocked(k) {
			st := cc.State()
			if st.StreamsActive+st.StreamsReserved+st.StreamsPending < d.cfg.streamsPerConn && cc.ReserveNewRequest() {
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
		if cc.ReserveNewRequest() {
			return cc, nil
		}
	}
}

func (d *Dialer) dialConn(ctx context.Context, t Target) (*http2.ClientConn, error) {
	tc, _, err := d.handshake(ctx, t)
	if err != nil {
		return nil, err
	}
	cc, err := d.t2.NewClientConn(&pooledConn{Conn: tc, gauge: d.cfg.metrics})
	if err != nil {
		_ = tc.Close()
		return nil, fmt.Errorf("hbone h2 with %s: %w", t.Gateway, err)
	}
	d.cfg.metrics.poolConns.Inc()
	d.cfg.metrics.poolDialed.Inc()
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
		d.cfg.metrics.handshake.WithLabelValues("outbound", "tls").Inc()
		return nil, nil, fmt.Errorf("hbone handshake with %s: %w", t.Gateway, err)
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		_ = raw.Close()
		d.cfg.metrics.handshake.WithLabelValues("outbound", "alpn").Inc()
		return nil, nil, fmt.Errorf("hbone handshake with %s: peer did not negotiate h2", t.Gateway)
	}
	return tc, bc, nil
}

// pooledConn keeps the pool gauge honest however the h2 connection ends
// (idle timeout, GOAWAY, error).
type pooledConn struct {
	net.Conn
	once  sync.Once
	gauge *Metrics
}

func (c *pooledConn) Close() error {
	c.once.Do(func() { c.gauge.poolConns.Dec() })
	return c.Conn.Close()
}

// roundTrip sends the CONNECT with body as the request stream and waits for
// the response headers, at most the connect timeout.
func (d *Dialer) roundTrip(ctx context.Context, t Target, body io.ReadCloser) (*http.Response, context.CancelFunc, error) {
	connectCtx, cancelConnect := context.WithTimeout(ctx, d.cfg.connectTimeout)
	defer cancelConnect()
	cc, err := d.clientConn(connectCtx, t)
	if err != nil {
		return nil, nil, err
	}
	// The stream lives as long as the tunnel, not as long as the connect
	// deadline, so it gets its own context; the deadline only cancels it
	// while the response headers are outstanding.
	streamCtx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(connectCtx, cancelStream)
	authority := t.Destination.String()
	req := &http.Request{
		Method:        http.MethodConnect,
		URL:           &url.URL{Host: authority},
		Host:          authority,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        d.headers(t),
		Body:          body,
		ContentLength: -1,
	}
	resp, err := cc.RoundTrip(req.WithContext(streamCtx))
	if !stop() && err == nil {
		err = context.Cause(connectCtx)
		_ = resp.Body.Close()
	}
	if err != nil {
		cancelStream()
		return nil, nil, fmt.Errorf("hbone CONNECT %s via %s: %w", authority, t.Gateway, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		cancelStream()
		return nil, nil, fmt.Errorf("hbone CONNECT %s via %s: %w", authority, t.Gateway, &StatusError{Code: resp.StatusCode})
	}
	return resp, cancelStream, nil
}

func (d *Dialer) headers(t Target) http.Header {
	h := http.Header{}
	if t.SourceAddr.IsValid() {
		h.Set("Forwarded", forwardedFor(t.SourceAddr))
	}
	if t.Baggage != "" {
		h.Set("Baggage", t.Baggage)
	}
	h.Set("Traceparent", newTraceparent())
	return h
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
// abort on either side resets the other.
func (d *Dialer) Proxy(ctx context.Context, t Target, downstream net.Conn) error {
	if !d.cfg.xnetH2 {
		return d.proxyTunnel(ctx, t, downstream)
	}
	// The transport reads the request body straight from downstream, so no
	// extra goroutine and buffer per tunnel are needed for that direction.
	body := &downstreamBody{conn: downstream, done: make(chan struct{}), counter: d.cfg.metrics.sent.WithLabelValues("outbound")}
	if rc := rawConn(downstream); rc != nil {
		body.r = newSockReader(rc)
	}
	resp, cancel, err := d.roundTrip(ctx, t, body)
	if err != nil {
		return err
	}
	defer cancel()
	d.cfg.metrics.opened.WithLabelValues("outbound").Inc()
	defer d.cfg.metrics.closed.WithLabelValues("outbound").Inc()

	stop := context.AfterFunc(ctx, func() { reset(downstream) })
	defer stop()
	rerr, writeFailed := splice(downstream, resp.Body, nil, d.cfg.metrics.received.WithLabelValues("outbound"))
	switch {
	case writeFailed: // downstream is gone; abort the stream
		cancel()
		reset(downstream)
	case errors.Is(rerr, io.EOF):
		closeWrite(downstream)
	default: // stream reset by the peer
		reset(downstream)
	}
	<-body.done
	_ = resp.Body.Close()
	_ = downstream.Close()
	if rerr != nil && !errors.Is(rerr, io.EOF) {
		return fmt.Errorf("hbone tunnel to %s: %w", t.Destination, rerr)
	}
	return nil
}

// downstreamBody is the request body of a tunnel: reads come from the
// downstream socket. Close, which the transport calls when it no longer wants
// the body (stream ended or reset), stops reading without closing the socket,
// because the response direction may still be writing to it.
type downstreamBody struct {
	conn    net.Conn
	once    sync.Once
	done    chan struct{}
	counter interface{ Add(float64) }
	// A TCP downstream is read with a sockReader: up to 64 KiB per syscall,
	// handed to the transport a DATA frame at a time (frames are 16 KiB: see
	// defaultMaxReadFrameSize), and no buffer held while the tunnel is idle.
	r       *sockReader
	big     *[]byte
	pending []byte
	err     error // the socket's error, returned once pending is drained
}

func (b *downstreamBody) Read(p []byte) (int, error) {
	// The transport sends each Read as one DATA frame; see maxRecordData.
	if len(p) > maxRecordData {
		p = p[:maxRecordData]
	}
	if b.r == nil {
		// A non-EOF error (a downstream RST) is passed on as is: the
		// transport answers it with RST_STREAM, which is what a downstream
		// abort becomes.
		n, err := b.conn.Read(p)
		if n > 0 {
			b.counter.Add(float64(n))
		}
		return n, err
	}
	if len(b.pending) == 0 && b.err == nil {
		var n int
		b.big, n, b.err = b.r.read()
		if b.big != nil {
			b.pending = (*b.big)[:n]
			b.counter.Add(float64(n))
		}
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	if len(b.pending) == 0 && b.big != nil {
		bigBufs.Put(b.big)
		b.big = nil
	}
	if n > 0 {
		return n, nil // an error, if any, comes on the next Read
	}
	return 0, b.err
}

// recordSizedReader caps reads like downstreamBody does, for Dial's pipe.
type recordSizedReader struct{ *io.PipeReader }

func (r recordSizedReader) Read(p []byte) (int, error) {
	if len(p) > maxRecordData {
		p = p[:maxRecordData]
	}
	return r.PipeReader.Read(p)
}

func (b *downstreamBody) Close() error {
	b.once.Do(func() {
		if cr, ok := b.conn.(interface{ CloseRead() error }); ok {
			_ = cr.CloseRead()
		}
		close(b.done)
	})
	return nil
}

// Dial opens a tunnel and returns it as a net.Conn, for callers that are not
// splicing an accepted socket (interop tests, benchmarks, tools).
func (d *Dialer) Dial(ctx context.Context, t Target) (net.Conn, error) {
	if !d.cfg.xnetH2 {
		return d.dialTunnel(ctx, t)
	}
	pr, pw := io.Pipe()
	resp, cancel, err := d.roundTrip(ctx, t, recordSizedReader{pr})
	if err != nil {
		_ = pw.Close()
		return nil, err
	}
	d.cfg.metrics.opened.WithLabelValues("outbound").Inc()
	return &tunnelConn{pw: pw, resp: resp, cancel: cancel, metrics: d.cfg.metrics,
		local: net.TCPAddrFromAddrPort(netip.AddrPortFrom(t.SourceAddr, 0)), remote: net.TCPAddrFromAddrPort(t.Destination)}, nil
}

// tunnelConn is a tunnel as a net.Conn. Deadlines are not supported: the
// tunnel is a stream on a shared connection, and its lifetime is bounded by
// Close and the pool's idle timeout instead.
type tunnelConn struct {
	pw            *io.PipeWriter
	resp          *http.Response
	cancel        context.CancelFunc
	metrics       *Metrics
	local, remote net.Addr
	once          sync.Once
}

func (c *tunnelConn) Read(p []byte) (int, error)  { return c.resp.Body.Read(p) }
func (c *tunnelConn) Write(p []byte) (int, error) { return c.pw.Write(p) }

// CloseWrite half-closes the tunnel: the server sees EOF from its upstream read.
func (c *tunnelConn) CloseWrite() error { return c.pw.Close() }

func (c *tunnelConn) Close() error {
	c.once.Do(func() {
		_ = c.pw.CloseWithError(net.ErrClosed)
		_ = c.resp.Body.Close()
		c.cancel()
		c.metrics.closed.WithLabelValues("outbound").Inc()
	})
	return nil
}
func (c *tunnelConn) LocalAddr() net.Addr              { return c.local }
func (c *tunnelConn) RemoteAddr() net.Addr             { return c.remote }
func (c *tunnelConn) SetDeadline(time.Time) error      { return errors.ErrUnsupported }
func (c *tunnelConn) SetReadDeadline(time.Time) error  { return errors.ErrUnsupported }
func (c *tunnelConn) SetWriteDeadline(time.Time) error { return errors.ErrUnsupported }
