package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

// TestConnectTimeout: a peer that accepts TCP but never answers the TLS
// handshake makes Dial fail with a deadline error instead of hanging.
func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	silent := listen(t, "127.0.0.1:0")
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold it open, say nothing
		}
	}()
	cli := issue(t, e.ca, clientID)
	d, err := NewDialer(
		WithRoots(func() *x509.CertPool { return e.ca.RootPool() }),
		WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return cli, nil }),
		withTimeouts(100*time.Millisecond, 0, 0),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tgt := e.target(e.echoAddr)
	tgt.Gateway = addrPortOf(silent.Addr())
	_, err = d.Dial(context.Background(), tgt)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial to a silent peer: %v, want a deadline error", err)
	}
}

// TestIdleConnectionsLeaveThePool: with no streams, a pooled connection is
// closed after the idle timeout and the pool gauge drops back to zero.
func TestIdleConnectionsLeaveThePool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cli := issue(t, e.ca, clientID)
	d, err := NewDialer(
		WithRoots(func() *x509.CertPool { return e.ca.RootPool() }),
		WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return cli, nil }),
		withTimeouts(0, 0, 50*time.Millisecond),
		WithMetrics(e.cm),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := d.Dial(context.Background(), e.target(e.echoAddr))
	if err != nil {
		t.Fatal(err)
	}
	if got := counter(e.cm.poolConns); got != 1 {
		t.Fatalf("pool gauge with one tunnel = %v", got)
	}
	c.Close()
	waitFor(t, func() bool { return d.PoolSize() == 0 && counter(e.cm.poolConns) == 0 })
	var _ net.Conn = c
}

// muteConn passes bytes until muted, then swallows what is written and
// drops what arrives: a peer gone without a FIN, as when its node stops.
type muteConn struct {
	net.Conn
	muted atomic.Bool
}

func (c *muteConn) Write(p []byte) (int, error) {
	if c.muted.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *muteConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil || !c.muted.Load() {
			return n, err
		}
	}
}

// probeDialer is a dialer with a short connect timeout whose connections
// are kept in conns, for the test to mute.
func probeDialer(t *testing.T, e *env, m *Metrics, conns chan<- *muteConn) *Dialer {
	t.Helper()
	cli := issue(t, e.ca, clientID)
	d, err := NewDialer(
		WithRoots(func() *x509.CertPool { return e.ca.RootPool() }),
		WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return cli, nil }),
		withTimeouts(300*time.Millisecond, 0, 0),
		WithMetrics(m),
		WithDialContext(func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			mc := &muteConn{Conn: c}
			conns <- mc
			return mc, nil
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func (d *Dialer) probes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.probing)
}

// TestSilentPeerLeavesThePool: a pooled connection whose peer went silent
// without a FIN fails the CONNECT in the connect timeout, does not answer
// the PING that follows, and is closed, so the next tunnel dials afresh
// instead of waiting on it until TCP gives up.
func TestSilentPeerLeavesThePool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := NewMetrics(prometheus.NewRegistry())
	conns := make(chan *muteConn, 4)
	d := probeDialer(t, e, m, conns)
	ctx := context.Background()
	c, err := d.Dial(ctx, e.target(e.echoAddr))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	first := <-conns
	first.muted.Store(true)
	if _, err := d.Dial(ctx, e.target(e.echoAddr)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a tunnel on the silent connection: %v, want a deadline error", err)
	}
	waitFor(t, func() bool { return d.probes() == 0 && d.PoolSize() == 0 })
	if got := counter(m.h2Errors.WithLabelValues("ping_timeout")); got != 1 {
		t.Fatalf("ping_timeout errors = %v, want 1", got)
	}
	c, err = d.Dial(ctx, e.target(e.echoAddr))
	if err != nil {
		t.Fatalf("the tunnel after the silent connection left the pool: %v", err)
	}
	defer c.Close()
	if got := counter(m.poolDialed); got != 2 {
		t.Fatalf("connections dialed = %v, want 2 (the silent one, then a new one)", got)
	}
}

// TestSlowUpstreamKeepsTheConnection: a CONNECT that times out because the
// server's upstream is slow leaves a live connection, which acks the PING
// and stays in the pool for the next tunnel.
func TestSlowUpstreamKeepsTheConnection(t *testing.T) {
	t.Parallel()
	slow := netip.MustParseAddrPort("127.0.0.1:9") // never dialed: the upstream dialer holds it
	e := newEnv(t, WithUpstreamDialer(func(ctx context.Context, _ netip.Addr, dst netip.AddrPort) (net.Conn, error) {
		if dst == slow {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", dst.String())
	}))
	m := NewMetrics(prometheus.NewRegistry())
	d := probeDialer(t, e, m, make(chan *muteConn, 4))
	ctx := context.Background()
	if _, err := d.Dial(ctx, e.target(slow)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a tunnel to a slow upstream: %v, want a deadline error", err)
	}
	waitFor(t, func() bool { return d.probes() == 0 })
	if got := counter(m.h2Errors.WithLabelValues("ping_timeout")); got != 0 {
		t.Fatalf("ping_timeout errors = %v, want 0: the server is alive", got)
	}
	c, err := d.Dial(ctx, e.target(e.echoAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := counter(m.poolDialed); got != 1 {
		t.Fatalf("connections dialed = %v, want 1: the live connection should have stayed pooled", got)
	}
}
