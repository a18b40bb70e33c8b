package hbone

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawH2 opens a TLS connection with a valid client certificate and speaks
// HTTP/2 frames directly, to send what a well-behaved client never would.
func rawH2(t *testing.T, e *env) (*http2.Framer, net.Conn) {
	t.Helper()
	cert := issue(t, e.ca, clientID)
	tc, err := tls.Dial("tcp", e.serverAddr.String(), &tls.Config{
		InsecureSkipVerify: true, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tc.Close() })
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(tc, tc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return fr, tc
}

func connectHeaders(authority string, extra ...hpack.HeaderField) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	_ = enc.WriteField(hpack.HeaderField{Name: ":method", Value: "CONNECT"})
	_ = enc.WriteField(hpack.HeaderField{Name: ":authority", Value: authority})
	for _, f := range extra {
		_ = enc.WriteField(f)
	}
	return buf.Bytes()
}

// TestStreamFloodRefused opens far more streams than the advertised 100 on
// one connection without waiting; the excess is refused, the metric counts
// it, and a tunnel on another connection keeps working meanwhile.
func TestStreamFloodRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// An established tunnel on a well-behaved connection.
	good, err := e.dial(e.echoAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()

	fr, tc := rawH2(t, e)
	block := connectHeaders(e.echoAddr.String())
	const streams = 300
	for i := 0; i < streams; i++ {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndHeaders: true}); err != nil {
			break // the server may hang up on us mid-flood
		}
	}
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	// The first 100 streams are accepted and stay open (echo tunnels); every
	// one beyond is refused with REFUSED_STREAM, the connection staying up.
	const excess = streams - 100
	refused := 0
	for refused < excess {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok && rst.ErrCode == http2.ErrCodeRefusedStream {
			refused++
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			t.Fatalf("server ended the connection (GOAWAY %v) instead of refusing streams", ga.ErrCode)
		}
	}
	if refused != excess {
		t.Fatalf("server refused %d of the %d streams beyond MAX_CONCURRENT_STREAMS", refused, excess)
	}
	waitFor(t, func() bool {
		return counter(e.sm.h2Errors.WithLabelValues("stream_REFUSED_STREAM_over_max_streams")) == excess
	})
	// The other connection's tunnel is unaffected.
	if _, err := io.WriteString(good, "still here"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("still here"))
	if _, err := io.ReadFull(good, buf); err != nil || string(buf) != "still here" {
		t.Fatalf("tunnel on another connection: %q, %v", buf, err)
	}
}

// TestHugeHeadersRefused sends a header list far beyond any limit, spread
// over CONTINUATION frames. It is beyond the 4× defaultMaxHeaderBytes that
// h2tun decodes (the CONTINUATION-flood defence, see the package doc), so the
// connection gets GOAWAY and the h2 error metric counts it; no tunnel is
// opened and other connections are unaffected.
func TestHugeHeadersRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good, err := e.dial(e.echoAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()

	fr, tc := rawH2(t, e)
	block := connectHeaders(e.echoAddr.String(), hpack.HeaderField{Name: "x-huge", Value: strings.Repeat("h", 1<<20)})
	const chunk = 16 << 10
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:chunk]}); err != nil {
		t.Fatal(err)
	}
	for off := chunk; off < len(block); off += chunk {
		end := min(off+chunk, len(block))
		if err := fr.WriteContinuation(1, end == len(block), block[off:end]); err != nil {
			break // the server may give up on the connection
		}
	}
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	status := ""
	for status == "" {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		if mh, ok := f.(*http2.MetaHeadersFrame); ok {
			status = mh.PseudoValue("status")
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			status = "goaway"
		}
	}
	if status != "goaway" {
		t.Fatalf("huge headers answered %q, want GOAWAY", status)
	}
	// The value of x-huge is longer than the decoder takes for one string:
	// x/net's framer calls that a COMPRESSION_ERROR (counted before the
	// GOAWAY is sent).
	if n := counter(e.sm.h2Errors.WithLabelValues("conn_COMPRESSION_ERROR")); n != 1 {
		t.Errorf("h2 errors conn_COMPRESSION_ERROR = %v, want 1", n)
	}
	if counter(e.sm.opened.WithLabelValues("inbound")) != 1 {
		t.Error("a tunnel was opened for the oversized request")
	}
	if _, err := io.WriteString(good, "ok"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(good, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("tunnel on another connection: %q, %v", buf, err)
	}
}

// TestClosedTunnelsAreNotRapidReset: a client that closes each answered
// tunnel with RST_STREAM (as Dial's Close does without CloseWrite) is not a
// rapid-reset attacker, however many tunnels it goes through in a second.
func TestClosedTunnelsAreNotRapidReset(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln := listen(t, "127.0.0.1:0")
	echoOn(ln)
	dst := addrPortOf(ln.Addr())
	one := make([]byte, 1)
	for i := 0; i < 2000; i++ {
		c, err := e.dial(dst)
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		_, _ = c.Write(one)
		if _, err := io.ReadFull(c, one); err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		c.Close()
	}
	if n := counter(e.sm.h2Errors.WithLabelValues("rapid_reset")); n != 0 {
		t.Errorf("rapid_reset counted %v times for tunnels closed after their answer", n)
	}
}
