package hbone

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/meshctl/meshctl/pkg/dataplane/hbone/internal/h2tun"
)

func (d *Dialer) pruneTunLocked(k poolKey) []*h2tun.Conn {
	ccs := d.tpool[k][:0]
	for _, cc := range d.tpool[k] {
		if cc.Usable() {
			ccs = append(ccs, cc)
		}
	}
	if len(ccs) == 0 {
		delete(d.tpool, k)
		return nil
	}
	d.tpool[k] = ccs
	return ccs
}

// tunConn is clientConn for h2tun connections: a pooled connection with a
// stream slot reserved, or a new one (one dial per key at a time).
func (d *Dialer) tunConn(ctx context.Context, t Target) (*h2tun.Conn, error) {
	k := poolKey{source: t.Source, peer: t.Peer, gateway: t.Gateway}
	for {
		d.mu.Lock()
		for _, cc := range d.pruneTunLocked(k) {
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

		cc, err := d.dialTunConn(ctx, t)
		d.mu.Lock()
		delete(d.dialing, k)
		close(done)
		if err == nil {
			d.tpool[k] = append(d.tpool[k], cc)
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

func (d *Dialer) dialTunConn(ctx context.Context, t Target) (*h2tun.Conn, error) {
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
		CountError:           func(kind string) { m.h2Errors.WithLabelValues(kind).Inc() },
		OnClose:              func() { m.poolConns.Dec() },
		Batch:                bc,
	})
	if err != nil {
		return nil, fmt.Errorf("hbone h2 with %s: %w", t.Gateway, err)
	}
	m.poolConns.Inc()
	m.poolDialed.Inc()
	return cc, nil
}

// connect opens a CONNECT stream to t and waits for its 200, at most the
// connect timeout. A stream the server refused unprocessed (REFUSED_STREAM,
// GOAWAY) is retried: on a busy connection the server may still count a
// stream the client already closed.
func (d *Dialer) connect(ctx context.Context, t Target) (*h2tun.Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.connectTimeout)
	defer cancel()
	authority := t.Destination.String()
	fields := d.headerFields(t)
	for attempt := 0; ; attempt++ {
		cc, err := d.tunConn(ctx, t)
		if err != nil {
			return nil, err
		}
		st, status, err := cc.Connect(ctx, authority, fields)
		if errors.Is(err, h2tun.ErrRefused) && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("hbone CONNECT %s via %s: %w", authority, t.Gateway, err)
		}
		if status != http.StatusOK {
			st.Close()
			return nil, fmt.Errorf("hbone CONNECT %s via %s: %w", authority, t.Gateway, &StatusError{Code: status})
		}
		return st, nil
	}
}

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

// proxyTunnel is Proxy on h2tun: each direction is copied by one goroutine
// straight from socket reads into DATA frames and from the stream's buffer
// into socket writes.
func (d *Dialer) proxyTunnel(ctx context.Context, t Target, downstream net.Conn) error {
	st, err := d.connect(ctx, t)
	if err != nil {
		return err
	}
	defer st.Close()
	d.cfg.metrics.opened.WithLabelValues("outbound").Inc()
	defer d.cfg.metrics.closed.WithLabelValues("outbound").Inc()
	stop := context.AfterFunc(ctx, func() { st.Reset(http2.ErrCodeCancel); reset(downstream) })
	defer stop()

	done := make(chan struct{})
	go func() {
		defer close(done)
		err, writeFailed := splice(st, downstream, nil, d.cfg.metrics.sent.WithLabelValues("outbound"))
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
	rerr, writeFailed := splice(downstream, st, nil, received)
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

// dialTunnel is Dial on h2tun.
func (d *Dialer) dialTunnel(ctx context.Context, t Target) (net.Conn, error) {
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
