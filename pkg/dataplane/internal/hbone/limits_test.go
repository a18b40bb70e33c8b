package hbone

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// rawTLS opens a mutual TLS connection to the server and reads until the
// server's first h2 frame or an error; it reports whether the server
// started HTTP/2 on it (false: it was closed at once).
func rawTLS(t *testing.T, e *env) (net.Conn, bool) {
	t.Helper()
	cert := issue(t, e.ca, clientID)
	tc, err := tls.Dial("tcp", e.serverAddr.String(), &tls.Config{
		InsecureSkipVerify: true, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS13,
	})
	if err != nil {
		return nil, false
	}
	t.Cleanup(func() { _ = tc.Close() })
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		return tc, false
	}
	fr := http2.NewFramer(tc, tc)
	if err := fr.WriteSettings(); err != nil {
		return tc, false
	}
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = fr.ReadFrame()
	_ = tc.SetReadDeadline(time.Time{})
	return tc, err == nil
}

// TestConnectionsPerIdentityLimited: beyond ConnsPerIdentity, a peer's
// connections are closed after the handshake; one closing frees a slot.
func TestConnectionsPerIdentityLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(serverLimits{ConnsPerIdentity: 2}))
	first, ok1 := rawTLS(t, e)
	_, ok2 := rawTLS(t, e)
	if !ok1 || !ok2 {
		t.Fatal("connections within the limit refused")
	}
	if _, ok := rawTLS(t, e); ok {
		t.Fatal("a third connection for one identity was served")
	}
	if n := counter(e.sm.limited.WithLabelValues("conns_per_identity")); n != 1 {
		t.Errorf("limited{conns_per_identity} = %v, want 1", n)
	}
	_ = first.Close()
	waitFor(t, func() bool { _, ok := rawTLS(t, e); return ok })
}

// TestConnectionsPerSourceLimited: beyond ConnsPerSource, connections from
// one IP are closed before the handshake.
func TestConnectionsPerSourceLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(serverLimits{ConnsPerSource: 1}))
	if _, ok := rawTLS(t, e); !ok {
		t.Fatal("the first connection was refused")
	}
	if _, ok := rawTLS(t, e); ok {
		t.Fatal("a second connection from one source was served")
	}
	if n := counter(e.sm.limited.WithLabelValues("conns_per_source")); n != 1 {
		t.Errorf("limited{conns_per_source} = %v, want 1", n)
	}
}

// TestTunnelsPerIdentityLimited: beyond TunnelsPerIdentity, a CONNECT is
// answered 429 and no upstream socket is opened; closing a tunnel frees a
// slot.
func TestTunnelsPerIdentityLimited(t *testing.T) {
	t.Parallel()
	var upstreams atomic.Int32
	e := newEnv(t, withLimits(serverLimits{TunnelsPerIdentity: 3}),
		WithUpstreamDialer(func(ctx context.Context, _ netip.Addr, dst netip.AddrPort) (net.Conn, error) {
			upstreams.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", dst.String())
		}))
	var held []net.Conn
	for range 3 {
		c, err := e.dial(e.echoAddr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if _, err := e.dial(e.echoAddr); statusOf(err) != 429 {
		t.Fatalf("fourth tunnel: %v, want 429", err)
	}
	if n := upstreams.Load(); n != 3 {
		t.Errorf("%d upstream dials, want 3", n)
	}
	if n := counter(e.sm.rejects.WithLabelValues("429", "tunnels_per_identity")); n != 1 {
		t.Errorf("rejects{429,tunnels_per_identity} = %v, want 1", n)
	}
	_ = held[0].Close()
	waitFor(t, func() bool {
		c, err := e.dial(e.echoAddr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	for _, c := range held[1:] {
		_ = c.Close()
	}
}

// TestUpstreamDialsCapped: no more than UpstreamDials upstream dials run at
// once; the others wait for a slot and then succeed.
func TestUpstreamDialsCapped(t *testing.T) {
	t.Parallel()
	var (
		mu            sync.Mutex
		inFlight, top int
		gate          = make(chan struct{})
	)
	e := newEnv(t, withLimits(serverLimits{UpstreamDials: 2}),
		WithUpstreamDialer(func(ctx context.Context, _ netip.Addr, dst netip.AddrPort) (net.Conn, error) {
			mu.Lock()
			inFlight++
			top = max(top, inFlight)
			mu.Unlock()
			defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", dst.String())
		}))
	const tunnels = 6
	errs := make(chan error, tunnels)
	for range tunnels {
		go func() {
			c, err := e.dial(e.echoAddr)
			if err == nil {
				_ = c.Close()
			}
			errs <- err
		}()
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return inFlight == 2 })
	close(gate)
	for range tunnels {
		if err := <-errs; err != nil {
			t.Errorf("tunnel: %v", err)
		}
	}
	if top != 2 {
		t.Errorf("%d upstream dials ran at once, want at most 2", top)
	}
}

// firehose is a destination that writes until its connection fails; done
// is closed once it has.
func firehose(t *testing.T) (netip.AddrPort, chan struct{}) {
	ln := listen(t, "127.0.0.1:0")
	done := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				close(done)
				return
			}
		}
	}()
	return addrPortOf(ln.Addr()), done
}

// TestStalledTunnelReset: a client that opens a tunnel and then never reads
// it (no WINDOW_UPDATE) has the stream reset after the stall timeout, and
// the upstream socket is closed: nothing stays pinned.
func TestStalledTunnelReset(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(serverLimits{StallTimeout: 200 * time.Millisecond}))
	dst, upstreamDone := firehose(t)
	fr, tc := rawH2(t, e)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectHeaders(dst.String()), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	// Read frames (so the socket never blocks) but never credit window.
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no reset of the stalled stream: %v", err)
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			if rst.ErrCode != http2.ErrCodeCancel {
				t.Fatalf("RST_STREAM %v, want CANCEL", rst.ErrCode)
			}
			break
		}
	}
	select {
	case <-upstreamDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection is still open")
	}
	if n := counter(e.sm.h2Errors.WithLabelValues("stream_stalled")); n != 1 {
		t.Errorf("h2 errors stream_stalled = %v, want 1", n)
	}
}

// TestNonReadingPeerClosed: a client that opens a tunnel with large windows
// and then stops reading its socket has the connection closed after the
// stall timeout (the server's socket write cannot complete), and the
// upstream socket with it.
func TestNonReadingPeerClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(serverLimits{StallTimeout: 200 * time.Millisecond}))
	dst, upstreamDone := firehose(t)
	fr, tc := rawH2(t, e)
	_ = tc.(*tls.Conn).NetConn().(*net.TCPConn).SetReadBuffer(4 << 10)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectHeaders(dst.String()), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	// Never read: the server's writes fill both sockets' buffers.
	select {
	case <-upstreamDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection is still open")
	}
}
