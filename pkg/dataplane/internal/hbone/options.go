package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
)

// Defaults from DESIGN.md (ztunnel's values).
const (
	DefaultMark             = 0x539
	defaultStreamsPerConn   = 100
	defaultStreamWindow     = 4 << 20
	defaultConnWindow       = 16 << 20
	defaultUpstreamTimeout  = 10 * time.Second
	defaultConnectTimeout   = 10 * time.Second
	defaultHandshakeTimeout = 10 * time.Second
	// defaultPingTimeout bounds the PING that checks a pooled connection
	// after a CONNECT on it timed out: a live peer acks at once, whatever
	// its upstreams are doing.
	defaultPingTimeout    = 5 * time.Second
	defaultIdleTimeout    = 10 * time.Minute
	defaultMaxHeaderBytes = 16 << 10
	// The server keeps the 16 KiB default: a client built on x/net's
	// Transport (Istio's Go HBONE, for one) holds a scratch buffer of the
	// peer's max frame size for every open stream, so a larger value would
	// cost that much per idle tunnel. Frames towards the client do not have
	// that cost, so the client accepts large ones.
	defaultMaxReadFrameSize     = 16 << 10
	clientMaxReadFrameSize      = 256 << 10
	defaultPoolIdleTimeout      = 60 * time.Second
	defaultServerMaxStreamsConn = 100
)

// Option configures a Dialer or a Server. Both take the same option type
// because most settings (trust, metrics, clock, logging) must agree between
// the two halves of one proxy; options that concern only one side are ignored
// by the other.
type Option func(*config)

type config struct {
	trustDomain      string
	roots            func() *x509.CertPool
	certForIP        func(ctx context.Context, dst netip.Addr) (*tls.Certificate, error)
	certForID        func(ctx context.Context, id identity.Identity) (*tls.Certificate, error)
	dial             func(ctx context.Context, network, addr string) (net.Conn, error)
	upstreamDial     func(ctx context.Context, src netip.Addr, dst netip.AddrPort) (net.Conn, error)
	authorize        func(ctx context.Context, peer identity.Identity, src, dst netip.AddrPort) error
	hostTarget       func(host string, port uint16, dst netip.Addr) (netip.AddrPort, bool)
	relay            func(host string, port uint16) (netip.AddrPort, bool)
	allowLoopback    bool
	metrics          *Metrics
	log              *slog.Logger
	now              func() time.Time
	upstreamTimeout  time.Duration
	connectTimeout   time.Duration
	handshakeTimeout time.Duration
	pingTimeout      time.Duration
	idleTimeout      time.Duration
	poolIdleTimeout  time.Duration
	maxHeaderBytes   int
	streamsPerConn   int
	limits           serverLimits
	// noInline turns off h2tun's inline delivery (Stream.SetSink): kept,
	// unexported, so the benchmarks can show both in one run.
	noInline bool
}

// withNoInline makes h2tun streams hand all data to their splice goroutine.
func withNoInline(on bool) Option { return func(c *config) { c.noInline = on } }

func newConfig(opts []Option) config {
	c := config{
		trustDomain:      ambient.DefaultTrustDomain,
		upstreamTimeout:  defaultUpstreamTimeout,
		connectTimeout:   defaultConnectTimeout,
		handshakeTimeout: defaultHandshakeTimeout,
		pingTimeout:      defaultPingTimeout,
		idleTimeout:      defaultIdleTimeout,
		poolIdleTimeout:  defaultPoolIdleTimeout,
		maxHeaderBytes:   defaultMaxHeaderBytes,
		streamsPerConn:   defaultStreamsPerConn,
		now:              time.Now,
	}
	for _, o := range opts {
		o(&c)
	}
	c.limits = c.limits.withDefaults()
	if c.metrics == nil {
		c.metrics = NewMetrics(prometheus.NewRegistry())
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.dial == nil {
		d := &net.Dialer{}
		c.dial = d.DialContext
	}
	return c
}

// WithTrustDomain sets the trust domain peers must belong to.
func WithTrustDomain(td string) Option { return func(c *config) { c.trustDomain = td } }

// WithRoots sets the mesh roots; a function, because roots rotate.
func WithRoots(roots func() *x509.CertPool) Option { return func(c *config) { c.roots = roots } }

// WithServerCertificates sets how the server finds the certificate of the
// workload a connection is addressed to, by destination IP.
func WithServerCertificates(f func(ctx context.Context, dst netip.Addr) (*tls.Certificate, error)) Option {
	return func(c *config) { c.certForIP = f }
}

// WithClientCertificates sets how the dialer finds a source workload's certificate.
func WithClientCertificates(f func(ctx context.Context, id identity.Identity) (*tls.Certificate, error)) Option {
	return func(c *config) { c.certForID = f }
}

// WithDialContext sets how TCP connections are opened: the dialer uses it for
// connections to peers, the server for connections to the destination. The
// proxy passes a function that dials inside the pod's network namespace.
func WithDialContext(f func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(c *config) { c.dial = f }
}

// WithUpstreamDialer sets how the server connects to a tunnel's destination,
// given the client's address (the HBONE connection's source) so that the
// destination can see it; it replaces WithDialContext for that one dial. The
// proxy uses it to preserve source addresses (IP_TRANSPARENT).
func WithUpstreamDialer(f func(ctx context.Context, src netip.Addr, dst netip.AddrPort) (net.Conn, error)) Option {
	return func(c *config) { c.upstreamDial = f }
}

// WithAuthorizer sets the inbound policy; an error makes the server answer 401.
func WithAuthorizer(f func(ctx context.Context, peer identity.Identity, src, dst netip.AddrPort) error) Option {
	return func(c *config) { c.authorize = f }
}

// WithHostAuthority lets the server take CONNECTs whose :authority names a
// service, host:port, as a network gateway forwards them (the inner tunnel
// of double HBONE): f maps the service port to the destination, on dst
// (the connection's own destination address) as always; false answers 503.
// Without it such requests are refused (400).
func WithHostAuthority(f func(host string, port uint16, dst netip.Addr) (netip.AddrPort, bool)) Option {
	return func(c *config) { c.hostTarget = f }
}

// WithRelay makes the server a network gateway: every CONNECT names a
// service, host:port, and f picks the next hop (an endpoint's ip:15008) to
// which the stream is spliced unread — the inner tunnel's mutual TLS stays
// between the two end proxies. The destination-address and self-call
// checks, which guard a pod's own namespace, do not apply; false answers
// 503. IP authorities are refused (400).
func WithRelay(f func(host string, port uint16) (netip.AddrPort, bool)) Option {
	return func(c *config) { c.relay = f }
}

// WithAllowLoopback lets CONNECT target loopback addresses. Only tests and
// benchmarks on 127.0.0.1 want this: in a pod it would expose the pod's
// localhost-only services to the mesh.
func WithAllowLoopback(allow bool) Option { return func(c *config) { c.allowLoopback = allow } }

// WithMetrics sets the metrics to update.
func WithMetrics(m *Metrics) Option { return func(c *config) { c.metrics = m } }

// WithLogger sets the structured logger.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// withTimeouts sets the connect (dialer: TCP+TLS+CONNECT response, and the
// PING that follows a CONNECT without answer), upstream dial (server) and
// idle (no streams on an h2 connection) timeouts; zero keeps a default.
func withTimeouts(connect, upstream, idle time.Duration) Option {
	return func(c *config) {
		if connect > 0 {
			c.connectTimeout, c.handshakeTimeout, c.pingTimeout = connect, connect, connect
		}
		if upstream > 0 {
			c.upstreamTimeout = upstream
		}
		if idle > 0 {
			c.idleTimeout, c.poolIdleTimeout = idle, idle
		}
	}
}

func markControl(mark int) func(network, address string, rc syscall.RawConn) error {
	if mark == 0 {
		return nil
	}
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, mark)
		}); err != nil {
			return err
		}
		return serr
	}
}

// MarkControl returns a net.Dialer/ListenConfig Control function that sets
// SO_MARK, for callers that build their own dialers.
func MarkControl(mark int) func(network, address string, rc syscall.RawConn) error {
	return markControl(mark)
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

func rawCerts(certs []*x509.Certificate) [][]byte {
	out := make([][]byte, len(certs))
	for i, c := range certs {
		out[i] = c.Raw
	}
	return out
}
