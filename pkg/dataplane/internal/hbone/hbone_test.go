package hbone

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/meshca"
)

func TestTunnelCarriesDataAndHalfClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := e.dial(e.echoAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	go func() {
		_, _ = c.Write(payload)
		// Half-close: the echo server only answers EOF after seeing ours.
		_ = c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echoed %d bytes, want %d identical", len(got), len(payload))
	}
	if n := counter(e.sm.opened.WithLabelValues("inbound")); n != 1 {
		t.Errorf("inbound opened = %v, want 1", n)
	}
	if n := counter(e.cm.sent.WithLabelValues("outbound")); n != 0 {
		// Dial (not Proxy) does not count bytes on the client side; Proxy does.
		t.Logf("outbound sent = %v", n)
	}
	if n := counter(e.sm.received.WithLabelValues("inbound")); n != float64(len(payload)) {
		t.Errorf("inbound received bytes = %v, want %d", n, len(payload))
	}
}

// TestProxyHalfCloseAndResetBothWays splices a real accepted socket, as the
// 15001 listener does.
func TestProxyHalfCloseAndResetBothWays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	// A destination that reports what happened to each connection.
	events := make(chan string, 4)
	dstLn := listen(t, "127.0.0.1:0")
	go func() {
		for {
			c, err := dstLn.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf, err := io.ReadAll(c)
				switch {
				case err != nil:
					events <- "reset"
				default:
					_, _ = c.Write([]byte("got " + string(buf)))
					_ = c.(*net.TCPConn).CloseWrite()
					events <- "eof"
				}
			}()
		}
	}()
	dst := addrPortOf(dstLn.Addr())

	proxied := func() net.Conn {
		app, down := tcpPair(t)
		go func() { _ = e.dialer.Proxy(context.Background(), e.target(dst), down) }()
		return app
	}

	// FIN from the app reaches the destination as EOF, and the answer and
	// the destination's FIN come back.
	app := proxied()
	_, _ = app.Write([]byte("ping"))
	_ = app.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(app)
	if err != nil || string(got) != "got ping" {
		t.Fatalf("read %q, %v; want %q", got, err, "got ping")
	}
	if ev := <-events; ev != "eof" {
		t.Fatalf("destination saw %s, want eof", ev)
	}
	app.Close()

	// An RST from the app reaches the destination as a reset, not an EOF.
	app = proxied()
	_, _ = app.Write([]byte("partial"))
	time.Sleep(50 * time.Millisecond) // let the tunnel come up before aborting
	_ = app.(*net.TCPConn).SetLinger(0)
	_ = app.Close()
	select {
	case ev := <-events:
		if ev != "reset" {
			t.Fatalf("destination saw %s after an app reset, want reset", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("destination never saw the app's reset")
	}
}

func TestUpstreamResetReachesClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dstLn := listen(t, "127.0.0.1:0")
	go func() {
		c, err := dstLn.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte("x"))
		time.Sleep(20 * time.Millisecond)
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
	}()
	c, err := e.dial(addrPortOf(dstLn.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err == nil {
		t.Fatalf("read %q and a clean EOF; want the upstream reset as an error", got)
	}
}

func TestServerHalfCloseFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dstLn := listen(t, "127.0.0.1:0")
	go func() {
		c, err := dstLn.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("banner"))
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, c)
	}()
	c, err := e.dial(addrPortOf(dstLn.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "banner" {
		t.Fatalf("read %q, %v; want banner then EOF", got, err)
	}
}

func TestInboundRejects(t *testing.T) {
	t.Parallel()
	denied := identity.New(td, "ns-a", "client")
	e := newEnv(t, WithAuthorizer(func(_ context.Context, peer identity.Identity, _, dst netip.AddrPort) error {
		if peer == denied && dst.Port() == 9 {
			return errors.New("policy says no")
		}
		return nil
	}))
	closedAddr := reservedClosedPort(t)
	for _, tc := range []struct {
		name   string
		dst    netip.AddrPort
		code   int
		reason string
	}{
		{"self call 15001", netip.MustParseAddrPort("127.0.0.1:15001"), 400, "self_call"},
		{"self call 15006", netip.MustParseAddrPort("127.0.0.1:15006"), 400, "self_call"},
		{"self call 15008", netip.MustParseAddrPort("127.0.0.1:15008"), 400, "self_call"},
		{"other IP than the connection's", netip.MustParseAddrPort("10.9.9.9:80"), 400, "destination_mismatch"},
		{"policy deny", netip.MustParseAddrPort("127.0.0.1:9"), 401, "denied"},
		{"upstream down", closedAddr, 503, "upstream"},
	} {
		_, err := e.dial(tc.dst)
		if got := statusOf(err); got != tc.code {
			t.Errorf("%s: err %v, want status %d", tc.name, err, tc.code)
		}
		if n := counter(e.sm.rejects.WithLabelValues(fmt.Sprint(tc.code), tc.reason)); n < 1 {
			t.Errorf("%s: reject metric %d/%s = %v", tc.name, tc.code, tc.reason, n)
		}
	}
	// The connection that carried the rejects still carries a tunnel.
	c, err := e.dial(e.echoAddr)
	if err != nil {
		t.Fatalf("tunnel after rejects: %v", err)
	}
	c.Close()
	if n := e.dialer.PoolSize(); n != 1 {
		t.Errorf("pool has %d connections after rejects, want 1", n)
	}
}

// rawClient is an h2 client with a valid mesh certificate that can send
// requests the Dialer never would: x/net's, an implementation independent of
// the server's h2tun.
//
//lint:ignore SA1019 x/net/http2's client conn is wanted here: an implementation independent of h2tun
func rawClient(t *testing.T, e *env, id identity.Identity) *http2.ClientConn {
	t.Helper()
	cert := issue(t, e.ca, id)
	tc, err := tls.Dial("tcp", e.serverAddr.String(), &tls.Config{
		InsecureSkipVerify: true, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 as above: x/net/http2, independent of h2tun
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func TestInboundRejectsMalformedRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cc := rawClient(t, e, clientID)
	for _, tc := range []struct {
		name, method, authority string
		header                  http.Header
		code                    int
		reason                  string
	}{
		{"not CONNECT", http.MethodGet, e.echoAddr.String(), nil, 400, "method"},
		{"host name authority", http.MethodConnect, "localhost:" + fmt.Sprint(e.echoAddr.Port()), nil, 400, "authority"},
		{"no port", http.MethodConnect, "127.0.0.1", nil, 400, "authority"},
		{"headers too large", http.MethodConnect, e.echoAddr.String(), http.Header{"X-Big": {strings.Repeat("a", 20<<10)}}, 431, "headers_too_large"},
	} {
		req := &http.Request{Method: tc.method, URL: mustURL(tc.method, tc.authority), Host: tc.authority, Header: tc.header}
		if req.Header == nil {
			req.Header = http.Header{}
		}
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.code)
		}
		if n := counter(e.sm.rejects.WithLabelValues(fmt.Sprint(tc.code), tc.reason)); n < 1 {
			t.Errorf("%s: reject metric = %v", tc.name, n)
		}
	}
}

func TestLoopbackRefusedByDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, WithAllowLoopback(false))
	_, err := e.dial(e.echoAddr)
	if statusOf(err) != 400 {
		t.Fatalf("CONNECT to %s: %v, want 400", e.echoAddr, err)
	}
	if n := counter(e.sm.rejects.WithLabelValues("400", "loopback")); n != 1 {
		t.Errorf("loopback reject metric = %v", n)
	}
}

func TestPlaintextToHBONEPort(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := net.Dial("tcp", e.serverAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "CONNECT 127.0.0.1:80 HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n")
	got, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(got), "HTTP/1.0 400 Bad Request") {
		t.Fatalf("plaintext answered %q, want a 400", got)
	}
	waitFor(t, func() bool { return counter(e.sm.handshake.WithLabelValues("inbound", "plaintext")) == 1 })
}

// waitFor polls cond for up to 10 s: long enough for a loaded machine under
// -race (2 s was not), and only a bound — a passing cond returns at once.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met")
}

func TestBadCertificatesRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	foreignCA, err := meshca.NewTest("foreign")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	expired, err := e.ca.Issue(clientID.URL(), now.Add(-2*time.Hour), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cert *tls.Certificate
	}{
		{"other trust domain", issue(t, e.ca, identity.New("evil.domain", "ns-a", "client"))},
		{"other root", issue(t, foreignCA, clientID)},
		{"expired", &expired},
	} {
		cert := tc.cert
		d, err := NewDialer(
			WithRoots(e.ca.RootPool),
			WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return cert, nil }),
		)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := d.Dial(ctx, e.target(e.echoAddr))
		cancel()
		if err == nil {
			c.Close()
			t.Errorf("%s: client certificate accepted", tc.name)
		}
		d.Close()
	}
	waitFor(t, func() bool { return counter(e.sm.handshake.WithLabelValues("inbound", "bad_certificate")) == 3 })

	// The client refuses a server whose SAN is not the expected peer.
	tgt := e.target(e.echoAddr)
	tgt.Peer = identity.New(td, "ns-b", "someone-else")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := e.dialer.Dial(ctx, tgt); err == nil {
		c.Close()
		t.Error("dialer accepted a server with the wrong SAN")
	}
	if n := counter(e.cm.handshake.WithLabelValues("outbound", "peer_identity")); n != 1 {
		t.Errorf("outbound handshake failures for the wrong peer = %v, want 1", n)
	}
}

func TestServerCertificateChosenByDestinationIP(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("by-ip")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[netip.Addr]identity.Identity{
		netip.MustParseAddr("127.0.0.1"): identity.New(td, "ns", "pod-one"),
		netip.MustParseAddr("127.0.0.2"): identity.New(td, "ns", "pod-two"),
	}
	certs := map[netip.Addr]*tls.Certificate{}
	for ip, id := range ids {
		certs[ip] = issue(t, c, id)
	}
	byIP := func(_ context.Context, dst netip.Addr) (*tls.Certificate, error) {
		if cert, ok := certs[dst]; ok {
			return cert, nil
		}
		return nil, fmt.Errorf("no workload at %s", dst)
	}
	cli := issue(t, c, clientID)
	d, err := NewDialer(WithRoots(c.RootPool), WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return cli, nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for ip, id := range ids {
		ln := listen(t, netip.AddrPortFrom(ip, 0).String())
		startServer(t, ln, WithRoots(c.RootPool), WithServerCertificates(byIP), WithAllowLoopback(true))
		gw := addrPortOf(ln.Addr())
		// Right identity: the tunnel is refused by the server's policy check
		// (nothing listens on port 1) only after TLS succeeded.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := d.Dial(ctx, Target{Source: clientID, Gateway: gw, Destination: netip.AddrPortFrom(ip, 1), Peer: id})
		cancel()
		if statusOf(err) != 503 {
			t.Errorf("%s as %s: %v, want TLS to succeed and 503", ip, id, err)
		}
		for otherIP, other := range ids {
			if otherIP == ip {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := d.Dial(ctx, Target{Source: clientID, Gateway: gw, Destination: netip.AddrPortFrom(ip, 1), Peer: other})
			cancel()
			if err == nil || statusOf(err) != 0 {
				t.Errorf("%s presented %s's certificate: %v", ip, other, err)
			}
		}
	}
}

func TestPoolReuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Sequential tunnels share one connection.
	for i := 0; i < 20; i++ {
		c, err := e.dial(e.echoAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if n := counter(e.cm.poolDialed); n != 1 {
		t.Fatalf("20 sequential tunnels dialed %v connections, want 1", n)
	}
	// 150 concurrently open tunnels need two connections of up to 100 streams.
	var conns []net.Conn
	for i := 0; i < 150; i++ {
		c, err := e.dial(e.echoAddr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if n := e.dialer.PoolSize(); n != 2 {
		t.Errorf("150 open tunnels use %d connections, want 2", n)
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			msg := fmt.Sprintf("tunnel %d", i)
			_, _ = io.WriteString(c, msg)
			buf := make([]byte, len(msg))
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
				t.Errorf("tunnel %d echoed %q, %v", i, buf, err)
			}
		}()
	}
	wg.Wait()
	if n := counter(e.cm.poolDialed); n != 2 {
		t.Errorf("dialed %v connections in all, want 2", n)
	}
}

func mustURL(method, authority string) *url.URL {
	if method == http.MethodConnect {
		return &url.URL{Host: authority}
	}
	return &url.URL{Scheme: "https", Host: authority, Path: "/"}
}

// TestConcurrentTunnelsShareOneDial: a burst of tunnels to a cold pool opens
// one connection, not one per tunnel.
func TestConcurrentTunnelsShareOneDial(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.dial(e.echoAddr)
			if err != nil {
				t.Error(err)
				return
			}
			c.Close()
		}()
	}
	wg.Wait()
	if n := counter(e.cm.poolDialed); n != 1 {
		t.Errorf("50 concurrent tunnels dialed %v connections, want 1", n)
	}
}

// reservedClosedPort returns a loopback port that refuses connections and
// that no other (parallel) test can start listening on meanwhile: a socket
// is bound to it but never listens.
func reservedClosedPort(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(sa.(*syscall.SockaddrInet4).Port))
}

// TestUpstreamDialerGetsTheClientAddress: WithUpstreamDialer is given the
// HBONE connection's source (what the proxy preserves) and the authority.
func TestUpstreamDialerGetsTheClientAddress(t *testing.T) {
	t.Parallel()
	type call struct {
		src netip.Addr
		dst netip.AddrPort
	}
	calls := make(chan call, 1)
	e := newEnv(t, WithUpstreamDialer(func(ctx context.Context, src netip.Addr, dst netip.AddrPort) (net.Conn, error) {
		calls <- call{src, dst}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", dst.String())
	}))
	c, err := e.dial(e.echoAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	got := <-calls
	if got.src != netip.MustParseAddr("127.0.0.1") || got.dst != e.echoAddr {
		t.Errorf("upstream dialer called with src %v dst %v; want 127.0.0.1 and %v", got.src, got.dst, e.echoAddr)
	}
}

// TestClientSendsAfterDestinationHalfCloses: a destination that sends its
// answer and FIN first still receives everything the client sends after
// that (x/net's Server, which hbone used before h2tun, dropped it), through
// Dial and through Proxy.
func TestClientSendsAfterDestinationHalfCloses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	received := make(chan int, 2)
	dstLn := listen(t, "127.0.0.1:0")
	go func() {
		for {
			c, err := dstLn.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write([]byte("banner"))
				_ = c.(*net.TCPConn).CloseWrite()
				n, _ := io.Copy(io.Discard, c)
				received <- int(n)
			}()
		}
	}()
	dst := addrPortOf(dstLn.Addr())
	payload := bytes.Repeat([]byte("x"), 6<<20) // beyond the 4 MiB stream window

	check := func(name string, c net.Conn) {
		t.Helper()
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "banner" {
			t.Fatalf("%s: read %q, %v; want banner then EOF", name, got, err)
		}
		if _, err := c.Write(payload); err != nil {
			t.Fatalf("%s: write after the destination's FIN: %v", name, err)
		}
		_ = c.(interface{ CloseWrite() error }).CloseWrite()
		if n := <-received; n != len(payload) {
			t.Fatalf("%s: destination received %d bytes after its FIN, want %d", name, n, len(payload))
		}
	}
	c, err := e.dial(dst)
	if err != nil {
		t.Fatal(err)
	}
	check("Dial", c)
	c.Close()

	app, down := tcpPair(t)
	go func() { _ = e.dialer.Proxy(context.Background(), e.target(dst), down) }()
	check("Proxy", app)
}

// TestTunnelCarriesPacedWrites: an interactive connection — small writes
// with pauses between them, as a shell's `while …; sleep 1; done | nc`
// makes — reaches the destination whole, each line when it is sent, and
// the tunnel stays open between them (seen on kind: a line a second,
// through istio-cni's redirection, stopped after the first).
func TestTunnelCarriesPacedWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lines := make(chan string, 16)
	dstLn := listen(t, "127.0.0.1:0")
	go func() {
		c, err := dstLn.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				lines <- "end: " + err.Error()
				return
			}
			lines <- l
		}
	}()
	app, down := tcpPair(t)
	go func() { _ = e.dialer.Proxy(context.Background(), e.target(addrPortOf(dstLn.Addr())), down) }()
	for i := range 4 {
		want := fmt.Sprintf("ping %d\n", i)
		if _, err := app.Write([]byte(want)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		select {
		case got := <-lines:
			if got != want {
				t.Fatalf("destination got %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("line %d never reached the destination", i)
		}
		time.Sleep(150 * time.Millisecond)
	}
	_ = app.Close()
}
