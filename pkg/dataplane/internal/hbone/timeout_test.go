package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

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
