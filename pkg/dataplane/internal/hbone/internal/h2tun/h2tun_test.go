package h2tun

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// counts records CountError calls.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) add(k string) { c.mu.Lock(); c.m[k]++; c.mu.Unlock() }
func (c *counts) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

// echoHandler answers 200 and echoes the stream, half-closing at EOF.
func echoHandler(s *Stream, _ *Request) {
	defer s.Close()
	if s.WriteHeader(200, false) != nil {
		return
	}
	if _, err := io.Copy(s, s); err == nil {
		_ = s.CloseWrite()
	}
}

// serve runs a server on one end of a pipe (synchronous: a peer that does
// not read blocks the server's writes at once) and returns the other end.
func serve(t *testing.T, cfg Config, h func(*Stream, *Request)) (net.Conn, *counts, chan struct{}) {
	t.Helper()
	cs, ss := net.Pipe()
	return serveOn(t, cs, ss, cfg, h)
}

// serveTCP is serve on loopback TCP, for tests of NewClient: a pipe would
// deadlock both prefaces, each end writing while neither reads.
func serveTCP(t *testing.T, cfg Config, h func(*Stream, *Request)) (net.Conn, *counts, chan struct{}) {
	t.Helper()
	cs, ss := tcpPair(t)
	return serveOn(t, cs, ss, cfg, h)
}

func serveOn(t *testing.T, cs, ss net.Conn, cfg Config, h func(*Stream, *Request)) (net.Conn, *counts, chan struct{}) {
	cnt := &counts{m: map[string]int{}}
	cfg.CountError = cnt.add
	done := make(chan struct{})
	go func() { _ = Serve(ss, cfg, time.Now().Add(5*time.Second), h); close(done) }()
	t.Cleanup(func() {
		_ = cs.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after the client went away")
		}
	})
	return cs, cnt, done
}

// rawClient returns a framer on c and hello, which writes the preface and
// SETTINGS; the goroutine that writes frames calls it first.
func rawClient(t *testing.T, c net.Conn) (fr *http2.Framer, hello func() error) {
	t.Helper()
	fr = http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	return fr, func() error {
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			return err
		}
		return fr.WriteSettings()
	}
}

func connectBlock(authority string) []byte {
	var b bytes.Buffer
	e := hpack.NewEncoder(&b)
	_ = e.WriteField(hpack.HeaderField{Name: ":method", Value: "CONNECT"})
	_ = e.WriteField(hpack.HeaderField{Name: ":authority", Value: authority})
	return b.Bytes()
}

// readUntilGoAway drains frames until a GOAWAY (returned) or an error.
func readUntilGoAway(fr *http2.Framer) (*http2.GoAwayFrame, error) {
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			return ga, nil
		}
	}
}

func TestClientServerHalfCloseBothWays(t *testing.T) {
	t.Parallel()
	// The server half-closes first (a banner then FIN) and must still
	// receive everything the client sends afterwards.
	got := make(chan []byte, 1)
	cs, _, _ := serveTCP(t, Config{}, func(s *Stream, _ *Request) {
		defer s.Close()
		_ = s.WriteHeader(200, false)
		_, _ = s.Write([]byte("banner"))
		_ = s.CloseWrite()
		b, _ := io.ReadAll(s)
		got <- b
	})
	st := connectOne(t, cs)
	defer st.Close()
	banner, err := io.ReadAll(st)
	if err != nil || string(banner) != "banner" {
		t.Fatalf("read %q, %v; want banner then EOF", banner, err)
	}
	// 8 MiB: more than the stream window, so flow control has to work
	// after the server's END_STREAM too.
	payload := bytes.Repeat([]byte("after the server's FIN "), 8<<20/23)
	if _, err := st.Write(payload); err != nil {
		t.Fatalf("write after the server half-closed: %v", err)
	}
	if err := st.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, payload) {
		t.Fatalf("server received %d bytes, want the %d sent after its FIN", len(b), len(payload))
	}
}

func TestRapidResetGetsGoAway(t *testing.T) {
	t.Parallel()
	// The handler never answers (an upstream dial that takes a while), so
	// every reset comes before the response, as in the attack.
	cs, cnt, _ := serve(t, Config{}, func(s *Stream, _ *Request) {
		defer s.Close()
		_, _ = io.Copy(io.Discard, s)
	})
	fr, hello := rawClient(t, cs)
	block := connectBlock("10.0.0.1:80")
	go func() {
		if hello() != nil {
			return
		}
		for i := uint32(0); i < 5000; i++ {
			id := 2*i + 1
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}) != nil ||
				fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	}()
	ga, err := readUntilGoAway(fr)
	if err != nil {
		t.Fatalf("no GOAWAY after a rapid reset flood: %v", err)
	}
	if ga.ErrCode != http2.ErrCodeEnhanceYourCalm || cnt.get("rapid_reset") != 1 {
		t.Fatalf("GOAWAY %v, rapid_reset counted %d; want ENHANCE_YOUR_CALM and 1 (%v)", ga.ErrCode, cnt.get("rapid_reset"), cnt.m)
	}
}

func TestPingFloodWithoutReadingClosesConnection(t *testing.T) {
	t.Parallel()
	cs, cnt, done := serve(t, Config{}, echoHandler)
	fr, hello := rawClient(t, cs)
	helloDone := make(chan struct{})
	go func() { _ = hello(); close(helloDone) }()
	// Read the server's SETTINGS, then never read again: every PING ack
	// queues, since the pipe blocks the server's next write.
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.(*http2.WindowUpdateFrame); ok { // the end of the server's hello
			break
		}
	}
	<-helloDone
	var err error
	for i := 0; i < 100000 && err == nil; i++ {
		err = fr.WritePing(false, [8]byte{byte(i)})
	}
	go func() { _, _ = io.Copy(io.Discard, cs) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("server still up after a PING flood")
	}
	if cnt.get("control_flood") == 0 {
		t.Fatalf("flood not counted: %v (last write error %v)", cnt.m, err)
	}
}

func TestEmptyDataFloodGetsGoAway(t *testing.T) {
	t.Parallel()
	cs, cnt, _ := serve(t, Config{}, echoHandler)
	fr, hello := rawClient(t, cs)
	go func() {
		if hello() != nil || fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock("10.0.0.1:80"), EndHeaders: true}) != nil {
			return
		}
		for i := 0; i < 5000; i++ {
			if fr.WriteData(1, false, nil) != nil {
				return
			}
		}
	}()
	ga, err := readUntilGoAway(fr)
	if err != nil || ga.ErrCode != http2.ErrCodeEnhanceYourCalm || cnt.get("empty_data_flood") != 1 {
		t.Fatalf("GOAWAY %v, %v, counted %d; want ENHANCE_YOUR_CALM", ga, err, cnt.get("empty_data_flood"))
	}
}

func TestStreamsBeyondLimitRefused(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	defer close(block)
	cs, cnt, _ := serve(t, Config{MaxConcurrentStreams: 2}, func(s *Stream, _ *Request) {
		defer s.Close()
		<-block
	})
	fr, hello := rawClient(t, cs)
	go func() {
		_ = hello()
		for i := uint32(0); i < 3; i++ {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2*i + 1, BlockFragment: connectBlock("10.0.0.1:80"), EndHeaders: true})
		}
	}()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			if rst.StreamID != 5 || rst.ErrCode != http2.ErrCodeRefusedStream {
				t.Fatalf("RST_STREAM %d %v, want stream 5 REFUSED_STREAM", rst.StreamID, rst.ErrCode)
			}
			break
		}
	}
	if cnt.get("stream_REFUSED_STREAM_over_max_streams") != 1 {
		t.Errorf("refusal not counted: %v", cnt.m)
	}
}

func TestResetPropagatesBothWays(t *testing.T) {
	t.Parallel()
	serverErr := make(chan error, 1)
	cs, _, _ := serveTCP(t, Config{}, func(s *Stream, _ *Request) {
		defer s.Close()
		_ = s.WriteHeader(200, false)
		_, err := io.ReadAll(s)
		serverErr <- err
	})
	st := connectOne(t, cs)
	_, _ = st.Write([]byte("x"))
	st.Reset(http2.ErrCodeCancel)
	var se *StreamError
	if err := <-serverErr; !errors.As(err, &se) || se.Code != http2.ErrCodeCancel {
		t.Fatalf("server read ended with %v, want a CANCEL reset", err)
	}
	st.Close()
}

// connectOne starts a client on cs and opens one CONNECT stream that the
// server answered 200; the client connection closes with the test.
func connectOne(t *testing.T, cs net.Conn) *Stream {
	t.Helper()
	cc, err := NewClient(cs, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	if !cc.Reserve() {
		t.Fatal("no stream slot on a new connection")
	}
	st, status, err := cc.Connect(t.Context(), "10.0.0.1:80", nil)
	if err != nil || status != 200 {
		t.Fatalf("connect: %d, %v", status, err)
	}
	return st
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// readBatcher is a Batcher for a plain socket: it reads up to 64 KiB at a
// time, as the TLS connection's socket does in hbone, and calls the read
// hook before each socket read, when what it had is used up.
type readBatcher struct {
	net.Conn
	buf     []byte
	pending []byte
	onBlock func()
}

func (b *readBatcher) StartBatch()          {}
func (b *readBatcher) EndBatch() error      { return nil }
func (b *readBatcher) OnReadBlock(f func()) { b.onBlock = f }
func (b *readBatcher) Read(p []byte) (int, error) {
	if len(b.pending) == 0 {
		if b.onBlock != nil {
			b.onBlock()
		}
		if b.buf == nil {
			b.buf = make([]byte, 64<<10)
		}
		n, err := b.Conn.Read(b.buf)
		if n == 0 {
			return 0, err
		}
		b.pending = b.buf[:n]
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func TestSinkKeepsOrderFlowControlAndEnd(t *testing.T) {
	t.Parallel()
	t.Run("unbatched", func(t *testing.T) { testSink(t, false) })
	// With a Batcher full-size frames are held and written to the sink
	// together, once the reader is about to block.
	t.Run("batched", func(t *testing.T) { testSink(t, true) })
}

func testSink(t *testing.T, batched bool) {
	t.Parallel()
	// The handler splices the stream to a real socket whose reader is slow
	// at first, so the connection's reader both writes inline and falls
	// back to the buffer (EAGAIN); the bytes must arrive complete, in
	// order, then EOF, across more than the stream and connection windows.
	dst, far := tcpPair(t)
	// Small, but not so small that loopback's 64 KiB segments stall TCP.
	_ = dst.SetWriteBuffer(64 << 10)
	var inlined, viaRead, bigSinkWrites atomic.Int64
	cs, ss := tcpPair(t)
	cfg := Config{}
	var sc net.Conn = ss
	if batched {
		b := &readBatcher{Conn: ss}
		cfg.Batch, sc = b, b
	}
	serveOn(t, cs, sc, cfg, func(s *Stream, _ *Request) {
		defer s.Close()
		rc, err := dst.SyscallConn()
		if err != nil {
			t.Error(err)
			return
		}
		s.SetSink(rc, func(n int) {
			inlined.Add(int64(n))
			if n > chunkSize { // more than one frame
				bigSinkWrites.Add(1)
			}
		})
		_ = s.WriteHeader(200, false)
		buf := make([]byte, 32<<10)
		for {
			n, err := s.Read(buf)
			viaRead.Add(int64(n))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				t.Error(werr)
				return
			}
			if err != nil {
				if err != io.EOF {
					t.Error(err)
				}
				_ = dst.CloseWrite()
				return
			}
		}
	})
	st := connectOne(t, cs)
	defer st.Close()

	payload := make([]byte, 20<<20) // over the 16 MiB connection window
	for i := 0; i+4 <= len(payload); i += 4 {
		binary.BigEndian.PutUint32(payload[i:], uint32(i))
	}
	go func() {
		// Small writes first (a request/response pattern), then big ones.
		p := payload
		for size := 100; len(p) > 0; size = min(size*2, 256<<10) {
			n := min(size, len(p))
			if _, err := st.Write(p[:n]); err != nil {
				t.Error(err)
				return
			}
			p = p[n:]
		}
		_ = st.CloseWrite()
	}()
	var got bytes.Buffer
	buf := make([]byte, 8<<10)
	for reads := 0; ; reads++ {
		if reads < 200 && reads%10 == 0 {
			time.Sleep(2 * time.Millisecond) // let the socket fill: EAGAIN
		}
		n, err := far.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), payload) {
		i := 0
		for i < min(got.Len(), len(payload)) && got.Bytes()[i] == payload[i] {
			i++
		}
		t.Fatalf("destination got %d bytes, want %d; first difference at %d", got.Len(), len(payload), i)
	}
	if inlined.Load() == 0 || viaRead.Load() == 0 {
		t.Fatalf("inline %d bytes, through Read %d: want both paths used", inlined.Load(), viaRead.Load())
	}
	if inlined.Load()+viaRead.Load() != int64(len(payload)) {
		t.Fatalf("inline %d + Read %d != %d sent", inlined.Load(), viaRead.Load(), len(payload))
	}
	if batched && bigSinkWrites.Load() == 0 {
		t.Fatal("no sink write took more than one frame: held frames were not written together")
	}
}

// TestWriteFramed sends payloads laid out for WriteFramed, of sizes around
// the segment boundaries, through an echo server; a small stream window
// makes the larger ones take the path that waits for window.
func TestWriteFramed(t *testing.T) {
	t.Parallel()
	for _, window := range []uint32{0, 20000} {
		t.Run(fmt.Sprint("window", window), func(t *testing.T) {
			t.Parallel()
			cs, _, _ := serveTCP(t, Config{StreamWindow: window}, echoHandler)
			st := connectOne(t, cs)
			defer st.Close()
			var want []byte
			go func() {
				for i, n := range []int{1, FramedPayload - 1, FramedPayload, FramedPayload + 1, 3*FramedPayload + 7, 4 * FramedPayload} {
					buf := make([]byte, 4*FramedStride)
					for j := range buf {
						buf[j] = 0xee // header room: must not reach the peer
					}
					seg := 0
					for left, k := n, 0; left > 0; seg++ {
						m := min(left, FramedPayload)
						for j := range m {
							buf[seg*FramedStride+FrameHeaderLen+j] = byte(i + k + j)
						}
						k += m
						left -= m
					}
					if w, err := st.WriteFramed(buf, n); err != nil || w != n {
						t.Errorf("WriteFramed(%d): %d, %v", n, w, err)
						return
					}
				}
				_ = st.CloseWrite()
			}()
			for i, n := range []int{1, FramedPayload - 1, FramedPayload, FramedPayload + 1, 3*FramedPayload + 7, 4 * FramedPayload} {
				for j := range n {
					want = append(want, byte(i+j))
				}
			}
			got, err := io.ReadAll(st)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("echoed %d bytes, want %d, equal %v", len(got), len(want), bytes.Equal(got, want))
			}
		})
	}
}

// writeSizes records the size of each Write to a connection.
type writeSizes struct {
	net.Conn
	mu    sync.Mutex
	sizes []int
}

func (w *writeSizes) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.sizes = append(w.sizes, len(p))
	w.mu.Unlock()
	return w.Conn.Write(p)
}

// TestWriteFramedWindowRuns: when the stream window covers only some of
// WriteFramed's segments, the whole segments it covers still leave as one
// write, framed in place; the segment the window splits goes through Write,
// and the rest follows once the peer opens the window.
func TestWriteFramedWindowRuns(t *testing.T) {
	t.Parallel()
	cs, ss := tcpPair(t)
	wc := &writeSizes{Conn: cs}
	cc, err := NewClient(wc, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	const window = 2*FramedPayload + 100
	fr := http2.NewFramer(ss, ss)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.ReadFull(ss, make([]byte, len(http2.ClientPreface))); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		t.Fatal(err)
	}
	var resp bytes.Buffer
	_ = hpack.NewEncoder(&resp).WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	type result struct {
		frames []int
		data   []byte
		err    error
	}
	res := make(chan result, 1)
	go func() {
		var r result
		defer func() { res <- r }()
		_ = ss.SetReadDeadline(time.Now().Add(10 * time.Second))
		opened := false
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				r.err = err
				return
			}
			switch f := f.(type) {
			case *http2.MetaHeadersFrame:
				r.err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: resp.Bytes(), EndHeaders: true})
			case *http2.DataFrame:
				r.frames = append(r.frames, len(f.Data()))
				r.data = append(r.data, f.Data()...)
				if !opened && len(r.data) == window {
					opened = true
					r.err = fr.WriteWindowUpdate(f.StreamID, 1<<20)
				}
				if f.StreamEnded() {
					return
				}
			}
			if r.err != nil {
				return
			}
		}
	}()
	if !cc.Reserve() {
		t.Fatal("no stream slot on a new connection")
	}
	st, status, err := cc.Connect(t.Context(), "10.0.0.1:80", nil)
	if err != nil || status != 200 {
		t.Fatalf("connect: %d, %v", status, err)
	}
	defer st.Close()
	const n = 4 * FramedPayload
	buf := make([]byte, 4*FramedStride)
	var want []byte
	for seg := range 4 {
		for j := range FramedPayload {
			b := byte(seg*7 + j)
			buf[seg*FramedStride+FrameHeaderLen+j] = b
			want = append(want, b)
		}
	}
	wc.mu.Lock()
	wc.sizes = nil
	wc.mu.Unlock()
	if w, err := st.WriteFramed(buf, n); err != nil || w != n {
		t.Fatalf("WriteFramed: %d, %v", w, err)
	}
	if err := st.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !bytes.Equal(r.data, want) {
		t.Fatalf("peer got %d bytes, want %d, equal %v", len(r.data), len(want), bytes.Equal(r.data, want))
	}
	wantFrames := []int{FramedPayload, FramedPayload, 100, FramedPayload - 100, FramedPayload, 0}
	if fmt.Sprint(r.frames) != fmt.Sprint(wantFrames) {
		t.Errorf("DATA frame sizes %v, want %v", r.frames, wantFrames)
	}
	wc.mu.Lock()
	sizes := wc.sizes
	wc.mu.Unlock()
	if len(sizes) == 0 || sizes[0] != 2*FramedStride {
		t.Errorf("socket writes %v: the two segments the window covered did not leave in one write of %d bytes", sizes, 2*FramedStride)
	}
}
