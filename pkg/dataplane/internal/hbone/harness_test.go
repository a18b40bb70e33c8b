package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/meshca"
)

const td = "cluster.local"

var (
	clientID = identity.New(td, "ns-a", "client")
	serverID = identity.New(td, "ns-b", "server")
)

// env is one client and one server proxy on loopback with a test CA and an
// echo destination.
type env struct {
	t          *testing.T
	ca         *meshca.CA
	serverAddr netip.AddrPort
	echoAddr   netip.AddrPort
	dialer     *Dialer
	server     *Server
	sm, cm     *Metrics
}

func issue(t testing.TB, c *meshca.CA, id identity.Identity) *tls.Certificate {
	t.Helper()
	cert, err := c.Issue(id.URL(), time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return &cert
}

func listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// tcpPair returns both ends of a loopback TCP connection, closed at the
// end of the test.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln := listen(t, "127.0.0.1:0")
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		_ = client.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

// echo serves connections by copying input back and half-closing at EOF.
func echo(t testing.TB) netip.AddrPort {
	ln := listen(t, "127.0.0.1:0")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return addrPortOf(ln.Addr())
}

func startServer(t testing.TB, ln net.Listener, opts ...Option) *Server {
	t.Helper()
	s, err := NewServer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func newEnv(t *testing.T, serverOpts ...Option) *env {
	t.Helper()
	c, err := meshca.NewTest("hbone-test")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ca: c, sm: NewMetrics(prometheus.NewRegistry()), cm: NewMetrics(prometheus.NewRegistry())}
	srvCert, cliCert := issue(t, c, serverID), issue(t, c, clientID)
	roots := c.RootPool()
	ln := listen(t, "127.0.0.1:0")
	e.serverAddr = addrPortOf(ln.Addr())
	e.server = startServer(t, ln, append([]Option{
		WithRoots(func() *x509.CertPool { return roots }),
		WithServerCertificates(func(context.Context, netip.Addr) (*tls.Certificate, error) { return srvCert, nil }),
		WithAllowLoopback(true),
		WithMetrics(e.sm),
		withTimeouts(2*time.Second, 2*time.Second, 0),
	}, serverOpts...)...)
	e.echoAddr = echo(t)
	e.dialer, err = NewDialer(
		WithRoots(func() *x509.CertPool { return roots }),
		WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return cliCert, nil }),
		WithMetrics(e.cm),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.dialer.Close() })
	return e
}

func (e *env) target(dst netip.AddrPort) Target {
	return Target{Source: clientID, SourceAddr: netip.MustParseAddr("127.0.0.1"), Gateway: e.serverAddr, Destination: dst, Peer: serverID}
}

func (e *env) dial(dst netip.AddrPort) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.dialer.Dial(ctx, e.target(dst))
}

func statusOf(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

func counter(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
