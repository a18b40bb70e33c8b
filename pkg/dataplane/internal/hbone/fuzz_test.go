package hbone

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
)

// FuzzServeCONNECT sends arbitrary methods, authorities and a header as
// requests on a live h2 connection to the server's tunnel side (h2tun, as
// ServeConn runs it after TLS). Whatever the input, the answer is a refusal —
// a status, or a stream or connection error for what the frame layer rejects
// — and the server only ever tries to reach the connection's own destination
// IP on a port that is not the proxy's.
func FuzzServeCONNECT(f *testing.F) {
	for _, s := range [][3]string{
		{"CONNECT", "10.0.0.5:8080", ""}, {"GET", "10.0.0.5:8080", ""}, {"CONNECT", "10.0.0.6:80", ""},
		{"CONNECT", "10.0.0.5:15008", ""}, {"CONNECT", "127.0.0.1:80", ""}, {"CONNECT", "[::1]:80", "x"},
		{"CONNECT", "localhost:80", ""}, {"CONNECT", "10.0.0.5:0", "forwarded"},
		{"CONNECT", "10.0.0.5:8080", strings.Repeat("h", 20<<10)},  // 431
		{"CONNECT", "10.0.0.5:8080", "a\x00b"},                     // not a valid field value: RST_STREAM
		{"CONNECT", "10.0.0.5:8080", strings.Repeat("h", 100<<10)}, // beyond 4× the limit: GOAWAY
		{"CONNECT", "10.0.0.5:8080", "after a GOAWAY"},             // on a new connection
	} {
		f.Add(s[0], s[1], s[2])
	}
	dst := netip.MustParseAddrPort("10.0.0.5:15008")
	var (
		mu     sync.Mutex // the dial runs in the server's stream goroutine
		dialed netip.AddrPort
	)
	s, err := NewServer(
		WithRoots(func() *x509.CertPool { return x509.NewCertPool() }),
		WithServerCertificates(func(context.Context, netip.Addr) (*tls.Certificate, error) { return nil, errors.New("unused") }),
		WithDialContext(func(_ context.Context, _, addr string) (net.Conn, error) {
			mu.Lock()
			dialed = netip.MustParseAddrPort(addr)
			mu.Unlock()
			return nil, errors.New("fuzz: no upstream")
		}),
	)
	if err != nil {
		f.Fatal(err)
	}
	info := &connInfo{peer: identity.New(td, "ns", "sa"), src: netip.MustParseAddrPort("10.0.0.9:40000"), dst: dst}
	var conn *fuzzConn // reused across inputs until the server ends it
	f.Cleanup(func() {
		if conn != nil {
			conn.close()
		}
	})
	f.Fuzz(func(t *testing.T, method, authority, header string) {
		if conn == nil {
			conn = newFuzzConn(t, s, info)
		}
		mu.Lock()
		dialed = netip.AddrPort{}
		mu.Unlock()
		answer := conn.request(t, method, authority, header)
		if answer == "goaway" || answer == "closed" {
			conn.close()
			conn = nil
		}
		mu.Lock()
		got := dialed
		mu.Unlock()
		switch answer {
		case "400", "431", "reset", "goaway", "closed":
			if got.IsValid() {
				t.Fatalf("%q %q answered %s after dialing %s", method, authority, answer, got)
			}
		case "503":
			if got.Addr() != dst.Addr() || ambient.IsProxyPort(got.Port()) || got.String() != authority {
				t.Fatalf("%q %q dialed %s", method, authority, got)
			}
		default:
			t.Fatalf("%q %q answered %s", method, authority, answer)
		}
	})
}

// fuzzConn is a client speaking raw h2 frames to serveTunnels over loopback
// TCP (a pipe would deadlock: both sides write their hello before reading).
type fuzzConn struct {
	c      net.Conn
	fr     *http2.Framer
	hbuf   bytes.Buffer
	henc   *hpack.Encoder // one per connection: the server's decoder keeps state
	nextID uint32
	cancel context.CancelFunc
	done   chan struct{}
}

func newFuzzConn(t *testing.T, s *Server, info *connInfo) *fuzzConn {
	t.Helper()
	c, sc := tcpPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	fc := &fuzzConn{c: c, fr: http2.NewFramer(c, c), nextID: 1, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(fc.done)
		defer sc.Close()
		s.serveTunnels(ctx, sc, newBatchConn(sc), info)
	}()
	fc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fc.henc = hpack.NewEncoder(&fc.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fc.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return fc
}

// request sends one request (no END_STREAM, as a CONNECT's) and returns the
// server's answer to it: its status, "reset" (RST_STREAM), "goaway", or
// "closed" (the connection ended).
func (fc *fuzzConn) request(t *testing.T, method, authority, header string) string {
	t.Helper()
	id := fc.nextID
	fc.nextID += 2
	fc.hbuf.Reset()
	_ = fc.henc.WriteField(hpack.HeaderField{Name: ":method", Value: method})
	_ = fc.henc.WriteField(hpack.HeaderField{Name: ":authority", Value: authority})
	_ = fc.henc.WriteField(hpack.HeaderField{Name: "x-fuzz", Value: header})
	block := fc.hbuf.Bytes()
	const chunk = 16 << 10 // the server's max frame size
	first := block[:min(chunk, len(block))]
	if err := fc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(block) <= chunk}); err != nil {
		return "closed"
	}
	for off := chunk; off < len(block); off += chunk {
		end := min(off+chunk, len(block))
		if err := fc.fr.WriteContinuation(id, end == len(block), block[off:end]); err != nil {
			break // the server gave up on the connection; read why
		}
	}
	_ = fc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := fc.fr.ReadFrame()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatalf("%q %q: no answer from the server in 10 s", method, authority)
		case err != nil:
			return "closed"
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				return f.PseudoValue("status")
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "reset"
			}
		case *http2.GoAwayFrame:
			return "goaway"
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fc.fr.WriteSettingsAck()
			}
		}
	}
}

func (fc *fuzzConn) close() {
	_ = fc.c.Close()
	fc.cancel()
	<-fc.done
}
