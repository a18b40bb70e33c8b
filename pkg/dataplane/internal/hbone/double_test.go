package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

var gatewayID = identity.New(td, "istio-system", "istio-eastwestgateway")

const svcHost = "web.ns-b.svc.cluster.local"

// doubleEnv is a client, a network gateway (relay) and the destination's
// proxy (taking host-named tunnels), all on loopback, and an echo server
// behind the destination.
type doubleEnv struct {
	*env
	gatewayAddr netip.AddrPort
	gm          *Metrics
	mu          sync.Mutex
	peersSeen   map[string][]identity.Identity // by hop
}

func newDoubleEnv(t *testing.T, hostAuthority bool) *doubleEnv {
	d := &doubleEnv{peersSeen: map[string][]identity.Identity{}, gm: NewMetrics(prometheus.NewRegistry())}
	see := func(hop string) Option {
		return WithAuthorizer(func(_ context.Context, peer identity.Identity, _, _ netip.AddrPort) error {
			d.mu.Lock()
			d.peersSeen[hop] = append(d.peersSeen[hop], peer)
			d.mu.Unlock()
			return nil
		})
	}
	opts := []Option{see("destination")}
	if hostAuthority {
		opts = append(opts, WithHostAuthority(func(host string, port uint16, dst netip.Addr) (netip.AddrPort, bool) {
			if host != svcHost || port != 80 {
				return netip.AddrPort{}, false
			}
			return netip.AddrPortFrom(dst, d.echoAddr.Port()), true
		}))
	}
	d.env = newEnv(t, opts...)
	gwCert := issue(t, d.ca, gatewayID)
	roots := d.ca.RootPool()
	ln := listen(t, "127.0.0.1:0")
	d.gatewayAddr = addrPortOf(ln.Addr())
	startServer(t, ln,
		WithRoots(func() *x509.CertPool { return roots }),
		WithServerCertificates(func(context.Context, netip.Addr) (*tls.Certificate, error) { return gwCert, nil }),
		WithMetrics(d.gm),
		see("gateway"),
		WithRelay(func(host string, port uint16) (netip.AddrPort, bool) {
			if host != svcHost || port != 80 {
				return netip.AddrPort{}, false
			}
			return d.serverAddr, true
		}))
	return d
}

func (d *doubleEnv) target(authority string, gwPeer identity.Identity, peers ...identity.Identity) Target {
	return Target{Source: clientID, SourceAddr: netip.MustParseAddr("127.0.0.1"), Gateway: d.gatewayAddr, Peer: gwPeer,
		Double: &Double{Authority: authority, Peers: peers, Network: "net1"}}
}

// proxy runs Dialer.Proxy for one accepted connection and returns the
// application's end of it and Proxy's result.
func (d *doubleEnv) proxy(t Target) (app io.ReadWriteCloser, result <-chan error) {
	a, b := tcpPair(d.t)
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res <- d.dialer.Proxy(ctx, t, b)
	}()
	return a, res
}

// TestDoubleHBONE: through the gateway, the client reaches the service's
// endpoint with two tunnels, one in the other: the gateway sees the client
// (outer mTLS) and forwards the inner stream unread, and the destination's
// proxy sees the client too (inner mTLS, end to end), so its policy sees
// the real source. Both CONNECTs name the service.
func TestDoubleHBONE(t *testing.T) {
	t.Parallel()
	d := newDoubleEnv(t, true)
	app, res := d.proxy(d.target(svcHost+":80", gatewayID, identity.New(td, "ns-b", "other"), serverID))
	msg := []byte("hello across networks")
	if _, err := app.Write(msg); err != nil {
		t.Fatal(err)
	}
	_ = app.(interface{ CloseWrite() error }).CloseWrite()
	got, err := io.ReadAll(app)
	if err != nil || string(got) != string(msg) {
		t.Fatalf("echo %q, %v", got, err)
	}
	if err := <-res; err != nil {
		t.Fatalf("Proxy: %v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, hop := range []string{"gateway", "destination"} {
		if p := d.peersSeen[hop]; len(p) != 1 || p[0] != clientID {
			t.Errorf("%s saw peers %v, want the client %s", hop, p, clientID)
		}
	}
	if n := counter(d.gm.opened.WithLabelValues("inbound")); n != 1 {
		t.Errorf("gateway tunnels opened = %v, want 1", n)
	}
}

// TestDoubleHBONERefusals: secure naming on both hops — a gateway that is
// not the required identity, an inner server outside the service's
// identities, or no identity to require at all — and a service the
// gateway cannot route (503), each fails the connection.
func TestDoubleHBONERefusals(t *testing.T) {
	t.Parallel()
	d := newDoubleEnv(t, true)
	wrong := identity.New(td, "ns-b", "impostor")
	cases := []struct {
		name   string
		target Target
		check  func(error) bool
	}{
		{"wrong gateway identity", d.target(svcHost+":80", wrong, serverID), func(err error) bool { return errors.Is(err, identity.ErrWrongPeer) }},
		{"wrong inner identity", d.target(svcHost+":80", gatewayID, wrong), func(err error) bool { return errors.Is(err, identity.ErrWrongPeer) }},
		{"no inner identity", d.target(svcHost+":80", gatewayID), func(err error) bool { return errors.Is(err, errNoPeers) }},
		{"unknown service", d.target("nope.ns-b.svc.cluster.local:80", gatewayID, serverID), func(err error) bool { return statusOf(err) == http.StatusServiceUnavailable }},
		{"IP authority at the gateway", d.target(d.serverAddr.String(), gatewayID, serverID), func(err error) bool { return statusOf(err) == http.StatusBadRequest }},
	}
	for _, c := range cases {
		_, res := d.proxy(c.target)
		if err := <-res; !c.check(err) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if n := counter(d.cm.handshake.WithLabelValues("outbound", "peer_identity")); n != 2 {
		t.Errorf("outbound peer_identity handshake failures = %v, want 2", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.peersSeen["destination"]; len(p) != 0 {
		t.Errorf("the destination served %d tunnels; every one should have been refused before", len(p))
	}
}

// A proxy not told how to map service host names refuses them (400):
// only tunnels a gateway forwards use them, and only a proxy with the
// model can map them.
func TestHostAuthorityRefusedWithoutResolver(t *testing.T) {
	t.Parallel()
	d := newDoubleEnv(t, false)
	_, res := d.proxy(d.target(svcHost+":80", gatewayID, serverID))
	if err := <-res; statusOf(err) != http.StatusBadRequest {
		t.Fatalf("host-named inner CONNECT to a proxy without the model: %v, want 400", err)
	}
}

func TestParseHostAuthority(t *testing.T) {
	t.Parallel()
	good := map[string]hostAuthority{
		"web.ns.svc.cluster.local:80": {"web.ns.svc.cluster.local", 80},
		"a:65535":                     {"a", 65535},
		"x-1.y2:8080":                 {"x-1.y2", 8080},
	}
	for s, want := range good {
		if got, err := parseHostAuthority(s); err != nil || got != want {
			t.Errorf("%q: %+v %v", s, got, err)
		}
	}
	for _, s := range []string{"", "web", ":80", "web:", "web:0", "web:080", "web:65536", "web:+80",
		"10.0.0.1:80", "[::1]:80", "Web.ns:80", "-web:80", "web-:80", "a..b:80", "web_1:80", "web:80:80"} {
		if got, err := parseHostAuthority(s); err == nil {
			t.Errorf("%q accepted as %+v", s, got)
		}
	}
}

// A host-named tunnel is held to the same limits as an addressed one: its
// service port must map to the connection's own destination, not to
// loopback (unless allowed) nor to the proxy's own ports.
func TestHostTargetChecks(t *testing.T) {
	t.Parallel()
	info := &connInfo{dst: netip.MustParseAddrPort("127.0.0.1:15008")}
	cases := []struct {
		to     string
		ok     bool
		code   int
		reason string
	}{
		{"127.0.0.1:8080", true, http.StatusBadRequest, "loopback"},
		{"10.0.0.9:8080", true, http.StatusBadRequest, "destination_mismatch"},
		{"", false, http.StatusServiceUnavailable, "unknown_host"},
	}
	for _, c := range cases {
		s := &Server{cfg: newConfig([]Option{WithHostAuthority(func(string, uint16, netip.Addr) (netip.AddrPort, bool) {
			if !c.ok {
				return netip.AddrPort{}, false
			}
			return netip.MustParseAddrPort(c.to), true
		})})}
		if _, code, reason := s.target(info, hostAuthority{"web.ns.svc.cluster.local", 80}); code != c.code || reason != c.reason {
			t.Errorf("to %q: %d %s, want %d %s", c.to, code, reason, c.code, c.reason)
		}
	}
	s := &Server{cfg: newConfig([]Option{WithAllowLoopback(true), WithHostAuthority(func(string, uint16, netip.Addr) (netip.AddrPort, bool) {
		return netip.MustParseAddrPort("127.0.0.1:15001"), true
	})})}
	if _, code, reason := s.target(info, hostAuthority{"web.ns.svc.cluster.local", 80}); reason != "self_call" {
		t.Errorf("a service port mapped to 15001: %d %s, want self_call", code, reason)
	}
}
