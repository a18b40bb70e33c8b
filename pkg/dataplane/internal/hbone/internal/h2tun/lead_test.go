package h2tun

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Tests of the leader/follower reading of client connections (lead.go),
// against a scripted server: it answers each CONNECT with 200 and writes
// what the test says, where the test says to cut it.

var testCert = sync.OnceValues(func() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"h2tun.test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
})

// cutConn holds back what is written past a cut, until release: the peer
// is left waiting in the middle of a frame or a TLS record.
type cutConn struct {
	net.Conn
	mu   sync.Mutex
	left int // bytes still let through; -1: no cut
	held []byte
	// chunks, when set, splits every write into pieces of random size
	// with a short pause after each.
	chunks *mrand.Rand
}

func (c *cutConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left < 0 {
		if c.chunks == nil {
			return c.Conn.Write(p)
		}
		for off := 0; off < len(p); {
			k := min(len(p)-off, 1+c.chunks.IntN(3000))
			if _, err := c.Conn.Write(p[off : off+k]); err != nil {
				return off, err
			}
			off += k
			time.Sleep(time.Duration(c.chunks.IntN(300)) * time.Microsecond)
		}
		return len(p), nil
	}
	k := min(len(p), c.left)
	if k > 0 {
		if _, err := c.Conn.Write(p[:k]); err != nil {
			return 0, err
		}
		c.left -= k
	}
	c.held = append(c.held, p[k:]...)
	return len(p), nil
}

func (c *cutConn) cutAfter(n int) {
	c.mu.Lock()
	c.left = n
	c.mu.Unlock()
}

func (c *cutConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.left = -1
	_, err := c.Conn.Write(c.held)
	c.held = nil
	return err
}

// scripted is the server end of a client connection under test.
type scripted struct {
	t        *testing.T
	conn     net.Conn // what frames are written to (TLS or the cutConn)
	cut      *cutConn
	wmu      sync.Mutex
	pingAcks chan [8]byte
	mute     atomic.Bool // leave CONNECTs unanswered
}

// newScripted connects a client to a scripted server over loopback TCP,
// with TLS 1.3 when useTLS (16 KiB records: no dynamic record sizing).
func newScripted(t *testing.T, useTLS bool, cfg Config, settings ...http2.Setting) (*Conn, *scripted) {
	t.Helper()
	cs, ss := tcpPair(t)
	cut := &cutConn{Conn: ss, left: -1}
	var cconn, sconn net.Conn = cs, cut
	if useTLS {
		cert, err := testCert()
		if err != nil {
			t.Fatal(err)
		}
		srv := tls.Server(cut, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, DynamicRecordSizingDisabled: true})
		cli := tls.Client(cs, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		errc := make(chan error, 1)
		go func() { errc <- srv.Handshake() }()
		if err := cli.Handshake(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		cconn, sconn = cli, srv
	}
	s := &scripted{t: t, conn: sconn, cut: cut, pingAcks: make(chan [8]byte, 100)}
	s.write(frames(func(fr *http2.Framer) { _ = fr.WriteSettings(settings...) }))
	cc, err := NewClient(cconn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	go s.readLoop()
	return cc, s
}

// readLoop answers the client's CONNECTs with 200 and notes PING acks.
func (s *scripted) readLoop() {
	if _, err := io.ReadFull(s.conn, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(nil, s.conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if s.mute.Load() {
				continue
			}
			// :status 200 is in HPACK's static table: encoding it changes
			// no dynamic table, so any encoder will do.
			var blk bytes.Buffer
			_ = hpack.NewEncoder(&blk).WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
			id := f.StreamID
			s.write(frames(func(fr *http2.Framer) {
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk.Bytes(), EndHeaders: true})
			}))
		case *http2.PingFrame:
			if f.IsAck() {
				select {
				case s.pingAcks <- f.Data:
				default:
				}
			}
		}
	}
}

func (s *scripted) write(b []byte) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.conn.Write(b); err != nil {
		s.t.Errorf("scripted server write: %v", err)
	}
}

// frames returns what f writes, as bytes.
func frames(f func(fr *http2.Framer)) []byte {
	var b bytes.Buffer
	f(http2.NewFramer(&b, nil))
	return b.Bytes()
}

// dataFrame is a DATA frame of any size (the framer writes 16 KiB at most).
func dataFrame(id uint32, p []byte, end bool) []byte {
	b := make([]byte, FrameHeaderLen, FrameHeaderLen+len(p))
	putDataHeader(b, id, len(p), end)
	return append(b, p...)
}

func openStreams(t *testing.T, cc *Conn, n int) []*Stream {
	t.Helper()
	sts := make([]*Stream, n)
	for i := range sts {
		if !cc.Reserve() {
			t.Fatal("Reserve failed")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, status, err := cc.Connect(ctx, "10.0.0.1:80", nil)
		cancel()
		if err != nil || status != 200 {
			t.Fatalf("Connect: %d %v", status, err)
		}
		sts[i] = st
		// Nothing else waits for the peer: the count of waiters must not
		// keep the Connect (a leaked count keeps the reading from Reads).
		waitFor(t, cc, "no goroutine counted as waiting for the peer", func() bool { return cc.waiting == 0 })
	}
	return sts
}

// waitFor polls cond under the connection's lock until it holds.
func waitFor(t *testing.T, cc *Conn, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cc.mu.Lock()
		ok := cond()
		cc.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitLead waits until st's Read, started by the caller, leads. A Read
// that follows the reader goroutine (which took the reading back after the
// grace period) gets the reading once the reader has read a frame: the
// server sends a PING for it to read.
func awaitLead(t *testing.T, cc *Conn, srv *scripted, st *Stream) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cc.mu.Lock()
		leads, follows := cc.leader == st && cc.inRead, st.following
		cc.mu.Unlock()
		if leads {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting until the Read leads")
		}
		if follows {
			srv.write(frames(func(fr *http2.Framer) { _ = fr.WritePing(false, [8]byte{'l', 'e', 'a', 'd'}) }))
		}
		time.Sleep(time.Millisecond)
	}
}

// holdGrace is a configuration whose connection leaves the reading to
// nobody until a Read takes it, however long that takes: what leads and
// what follows then depends on the test alone.
var holdGrace = Config{leadGrace: time.Hour}

type readResult struct {
	b   []byte
	err error
}

// readFull reads n bytes (or up to an error) in the background.
func readFull(st *Stream, n int) <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		b := make([]byte, n)
		k, err := io.ReadFull(st, b)
		ch <- readResult{b[:k], err}
	}()
	return ch
}

func result(t *testing.T, ch <-chan readResult, what string) readResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: Read did not return", what)
		return readResult{}
	}
}

func forBoth(t *testing.T, f func(t *testing.T, useTLS bool)) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[useTLS], func(t *testing.T) {
			t.Parallel()
			f(t, useTLS)
		})
	}
}

// TestLeaderReadsItsOwnData: a Read with nobody else reading reads the
// connection itself, and afterwards the reading is left for the next Read.
func TestLeaderReadsItsOwnData(t *testing.T) {
	t.Parallel()
	forBoth(t, func(t *testing.T, useTLS bool) {
		cc, srv := newScripted(t, useTLS, holdGrace)
		st := openStreams(t, cc, 1)[0]
		for i := range 20 {
			want := fmt.Appendf(nil, "response %d", i)
			rc := readFull(st, len(want))
			awaitLead(t, cc, srv, st)
			srv.write(dataFrame(st.id, want, false))
			if r := result(t, rc, "own data"); r.err != nil || !bytes.Equal(r.b, want) {
				t.Fatalf("Read %q, %v; want %q", r.b, r.err, want)
			}
		}
		cc.mu.Lock()
		led := cc.ledFrames
		cc.mu.Unlock()
		if led < 20 {
			t.Errorf("leaders read %d frames, want the 20 DATA frames at least", led)
		}
		// With the default grace the reading goes back to the reader
		// goroutine once nobody takes it.
		cc, srv = newScripted(t, useTLS, Config{})
		st = openStreams(t, cc, 1)[0]
		waitFor(t, cc, "the reader goroutine reads again", func() bool { return cc.bgLeads })
		rc := readFull(st, 2)
		awaitLead(t, cc, srv, st)
		srv.write(dataFrame(st.id, []byte("ok"), false))
		if r := result(t, rc, "after the grace"); r.err != nil || string(r.b) != "ok" {
			t.Fatalf("Read %q, %v", r.b, r.err)
		}
	})
}

// TestLeaderHandsOverACutFrame: the leader's stream is closed while it
// waits in the socket read in the middle of a frame (or of a TLS record);
// its Read returns at once, and the follower, reading next, gets its frame
// whole.
func TestLeaderHandsOverACutFrame(t *testing.T) {
	t.Parallel()
	payload := make([]byte, 20000) // two TLS records
	for i := range payload {
		payload[i] = byte(i*7 + i>>8)
	}
	frame := dataFrame(3, payload, false)
	// TLS 1.3 record: 5 bytes of header, 16 KiB of data, a content type
	// byte and a 16-byte tag.
	const record = 5 + 16384 + 1 + 16
	cases := []struct {
		name   string
		tls    bool
		cut    int
		replay bool // the framer had part of the frame
	}{
		{"between frames", false, 0, false},
		{"in a frame header", false, 5, true},
		{"in a payload", false, FrameHeaderLen + 100, true},
		{"between TLS records", true, 0, false},
		{"in a TLS record", true, 10, false},
		{"after a TLS record, in a payload", true, record, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := holdGrace
			cfg.MaxReadFrameSize = 64 << 10
			cc, srv := newScripted(t, tc.tls, cfg)
			sts := openStreams(t, cc, 2)
			a, b := sts[0], sts[1]
			if b.id != 3 {
				t.Fatalf("second stream is %d", b.id)
			}
			ra := readFull(a, 1)
			awaitLead(t, cc, srv, a)
			rb := readFull(b, len(payload))
			waitFor(t, cc, "B follows", func() bool { return b.following })

			srv.cut.cutAfter(tc.cut)
			srv.write(frame)
			time.Sleep(50 * time.Millisecond) // the leader takes what it can
			a.Close()
			if r := result(t, ra, "closed leader"); r.err == nil {
				t.Fatalf("closed stream's Read returned %q without an error", r.b)
			}
			if err := srv.cut.release(); err != nil {
				t.Fatal(err)
			}
			if r := result(t, rb, "follower"); r.err != nil || !bytes.Equal(r.b, payload) {
				t.Fatalf("follower got %d bytes, %v; want the %d sent", len(r.b), r.err, len(payload))
			}
			cc.mu.Lock()
			replayed := cc.frd.saved != nil
			cc.mu.Unlock()
			if replayed != tc.replay {
				t.Errorf("frame beginning kept for replay: %v, want %v", replayed, tc.replay)
			}
			// The connection is still sound: another round on B.
			rb = readFull(b, 5)
			srv.write(dataFrame(3, []byte("again"), false))
			if r := result(t, rb, "after"); r.err != nil || string(r.b) != "again" {
				t.Fatalf("after the hand-over: %q, %v", r.b, r.err)
			}
		})
	}
}

// TestLeaderInterruptWaitsForHeaderBlock: the HPACK decoder takes a header
// block's fragments as they come, so a block cut between HEADERS and
// CONTINUATION cannot be read again: a leader interrupted there reads the
// block to its end before it returns.
func TestLeaderInterruptWaitsForHeaderBlock(t *testing.T) {
	t.Parallel()
	cc, srv := newScripted(t, false, holdGrace)
	sts := openStreams(t, cc, 2)
	a, b := sts[0], sts[1]
	var blk bytes.Buffer
	enc := hpack.NewEncoder(&blk)
	_ = enc.WriteField(hpack.HeaderField{Name: "x-trailer-one", Value: "1"})
	_ = enc.WriteField(hpack.HeaderField{Name: "x-trailer-two", Value: "2"})
	half := blk.Len() / 2
	headers := frames(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: b.id, BlockFragment: blk.Bytes()[:half], EndStream: true})
	})
	cont := frames(func(fr *http2.Framer) { _ = fr.WriteContinuation(b.id, true, blk.Bytes()[half:]) })

	ra := readFull(a, 1)
	awaitLead(t, cc, srv, a)
	rb := readFull(b, 1)
	waitFor(t, cc, "B follows", func() bool { return b.following })
	srv.cut.cutAfter(len(headers) + 3)
	srv.write(append(headers, cont...))
	time.Sleep(50 * time.Millisecond)
	a.Close()
	select {
	case r := <-ra:
		t.Fatalf("leader returned (%q, %v) in the middle of a header block", r.b, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := srv.cut.release(); err != nil {
		t.Fatal(err)
	}
	if r := result(t, ra, "closed leader"); r.err == nil {
		t.Fatal("closed stream's Read returned without an error")
	}
	if r := result(t, rb, "trailers"); r.err != io.EOF {
		t.Fatalf("stream ended by trailers: Read %q, %v; want EOF", r.b, r.err)
	}
}

// TestLeaderAndFollowerWhenTheConnectionEnds: GOAWAY, a connection error,
// the peer's close and our own Close, while one Read leads and another
// follows: every Read that can no longer be answered returns.
func TestLeaderAndFollowerWhenTheConnectionEnds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		end  func(cc *Conn, srv *scripted)
	}{
		{"connection error", func(_ *Conn, srv *scripted) {
			srv.write(dataFrame(99, []byte("idle stream"), false)) // PROTOCOL_ERROR
		}},
		{"peer closes", func(_ *Conn, srv *scripted) { _ = srv.cut.Conn.Close() }},
		{"Close", func(cc *Conn, _ *scripted) { _ = cc.Close() }},
		{"malformed frame", func(_ *Conn, srv *scripted) {
			srv.write([]byte{0, 0, 3, byte(http2.FrameSettings), 0, 0, 0, 0, 0, 1, 2, 3}) // length not a multiple of 6
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forBoth(t, func(t *testing.T, useTLS bool) {
				cc, srv := newScripted(t, useTLS, holdGrace)
				sts := openStreams(t, cc, 3)
				ra := readFull(sts[0], 1)
				awaitLead(t, cc, srv, sts[0])
				rb, rc := readFull(sts[1], 1), readFull(sts[2], 1)
				waitFor(t, cc, "two Reads follow", func() bool { return len(cc.followers) == 2 })
				tc.end(cc, srv)
				for i, ch := range []<-chan readResult{ra, rb, rc} {
					if r := result(t, ch, fmt.Sprint("stream ", i)); r.err == nil {
						t.Errorf("stream %d: Read returned %q without an error", i, r.b)
					}
				}
				if cc.Usable() {
					t.Error("connection still usable")
				}
			})
		})
	}
	t.Run("GOAWAY", func(t *testing.T) {
		t.Parallel()
		forBoth(t, func(t *testing.T, useTLS bool) {
			cc, srv := newScripted(t, useTLS, holdGrace)
			sts := openStreams(t, cc, 2)
			ra := readFull(sts[0], 4)
			awaitLead(t, cc, srv, sts[0])
			rb := readFull(sts[1], 1)
			waitFor(t, cc, "a Read follows", func() bool { return sts[1].following })
			srv.write(frames(func(fr *http2.Framer) { _ = fr.WriteGoAway(sts[0].id, http2.ErrCodeNo, nil) }))
			if r := result(t, rb, "refused stream"); !errors.Is(r.err, ErrRefused) {
				t.Errorf("stream beyond GOAWAY: Read %q, %v; want ErrRefused", r.b, r.err)
			}
			srv.write(dataFrame(sts[0].id, []byte("kept"), true))
			if r := result(t, ra, "kept stream"); r.err != nil || string(r.b) != "kept" {
				t.Errorf("stream below GOAWAY: Read %q, %v", r.b, r.err)
			}
		})
	})
}

// TestNobodyReading: once no Read waits, the reader goroutine reads again
// within leadGrace: a PING is acked, a WINDOW_UPDATE frees a Write, and the
// peer's close ends the connection.
func TestNobodyReading(t *testing.T) {
	t.Parallel()
	forBoth(t, func(t *testing.T, useTLS bool) {
		cc, srv := newScripted(t, useTLS, Config{}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
		st := openStreams(t, cc, 1)[0]
		rc := readFull(st, 2)
		awaitLead(t, cc, srv, st)
		srv.write(dataFrame(st.id, []byte("hi"), false))
		if r := result(t, rc, "Read"); r.err != nil {
			t.Fatal(r.err)
		}
		// Nobody reads now.
		srv.write(frames(func(fr *http2.Framer) { _ = fr.WritePing(false, [8]byte{7}) }))
		select {
		case d := <-srv.pingAcks:
			if d != [8]byte{7} {
				t.Fatalf("PING ack %v", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("PING not acked with no Read waiting")
		}
		wrote := make(chan error, 1)
		go func() { _, err := st.Write(make([]byte, 5000)); wrote <- err }()
		waitFor(t, cc, "the Write waits for window", func() bool { return st.waitingSend })
		srv.write(frames(func(fr *http2.Framer) { _ = fr.WriteWindowUpdate(st.id, 10000) }))
		select {
		case err := <-wrote:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("WINDOW_UPDATE not read with no Read waiting")
		}
		_ = srv.cut.Conn.Close()
		deadline := time.Now().Add(5 * time.Second)
		for cc.Usable() {
			if time.Now().After(deadline) {
				t.Fatal("the peer's close went unnoticed with no Read waiting")
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// TestOneStreamNotReading: a stream whose data waits unread does not hold
// up the others, which lead and follow around it, and keeps its data.
func TestOneStreamNotReading(t *testing.T) {
	t.Parallel()
	banner := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB
	cs, _, _ := serveTCP(t, Config{}, func(s *Stream, req *Request) {
		if req.Authority != "banner:1" {
			echoHandler(s, req)
			return
		}
		defer s.Close()
		if s.WriteHeader(200, false) == nil {
			_, _ = s.Write(banner)
			_, _ = io.Copy(io.Discard, s)
		}
	})
	cc, err := NewClient(cs, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	connect := func(authority string) *Stream {
		if !cc.Reserve() {
			t.Fatal("Reserve failed")
		}
		st, status, err := cc.Connect(context.Background(), authority, nil)
		if err != nil || status != 200 {
			t.Fatalf("Connect %s: %d %v", authority, status, err)
		}
		return st
	}
	idle := connect("banner:1")
	var wg sync.WaitGroup
	for w := range 4 {
		st := connect("echo:1")
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer st.Close()
			for i := range 200 {
				msg := fmt.Appendf(nil, "worker %d round %d", w, i)
				if _, err := st.Write(msg); err != nil {
					t.Error(err)
					return
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(st, got); err != nil || !bytes.Equal(got, msg) {
					t.Errorf("echo %q, %v; want %q", got, err, msg)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := make([]byte, len(banner))
	if _, err := io.ReadFull(idle, got); err != nil || !bytes.Equal(got, banner) {
		t.Fatalf("the stream that did not read got %d bytes back, %v", len(got), err)
	}
	idle.Close()
}

// TestManyStreamsLeadFollowAndClose: 50 streams echo messages of random
// sizes with Reads of random sizes, while a third of them are closed in
// the middle of a Read by another goroutine: the others' data stays whole,
// and no Read is left waiting.
func TestManyStreamsLeadFollowAndClose(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprint("batched=", batched), func(t *testing.T) {
			t.Parallel()
			cs, _, _ := serveTCP(t, Config{}, echoHandler)
			var nc net.Conn = cs
			cfg := Config{}
			if batched {
				rb := &readBatcher{Conn: cs}
				nc, cfg.Batch = rb, rb
			}
			cc, err := NewClient(nc, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cc.Close() })
			var wg sync.WaitGroup
			for w := range 50 {
				if !cc.Reserve() {
					t.Fatal("Reserve failed")
				}
				st, status, err := cc.Connect(context.Background(), "echo:1", nil)
				if err != nil || status != 200 {
					t.Fatalf("Connect: %d %v", status, err)
				}
				rng := mrand.New(mrand.NewPCG(uint64(w), 1))
				victim := w%3 == 0
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer st.Close()
					if victim {
						time.AfterFunc(time.Duration(rng.IntN(20))*time.Millisecond, st.Close)
					}
					for i := 0; i < 100; i++ {
						msg := make([]byte, 1+rng.IntN(40000))
						for j := range msg {
							msg[j] = byte(w + i + j)
						}
						if _, err := st.Write(msg); err != nil {
							if !victim {
								t.Errorf("stream %d: Write: %v", w, err)
							}
							return
						}
						got := make([]byte, 0, len(msg))
						for len(got) < len(msg) {
							buf := make([]byte, 1+rng.IntN(len(msg)-len(got)))
							n, err := st.Read(buf)
							got = append(got, buf[:n]...)
							if err != nil {
								if !victim {
									t.Errorf("stream %d: Read: %v", w, err)
								}
								return
							}
						}
						if !bytes.Equal(got, msg) {
							t.Errorf("stream %d round %d: echo differs", w, i)
							return
						}
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("streams still running (a Read left waiting?)")
			}
			cc.mu.Lock()
			led := cc.ledFrames
			cc.mu.Unlock()
			if led == 0 {
				t.Error("no frame was read by a leader")
			}
		})
	}
}

// TestLeaderHandOverAnywhere: the server's frames (DATA of every size,
// header blocks split into CONTINUATIONs, PINGs, WINDOW_UPDATEs) reach the
// socket in pieces of random size, while streams are closed at random
// moments in the middle of their Reads and Reads of random sizes hand the
// reading around: the other streams get exactly what was sent to them.
func TestLeaderHandOverAnywhere(t *testing.T) {
	t.Parallel()
	forBoth(t, func(t *testing.T, useTLS bool) {
		for seed := range uint64(3) {
			handOverAnywhere(t, useTLS, seed)
		}
	})
}

func handOverAnywhere(t *testing.T, useTLS bool, seed uint64) {
	rng := mrand.New(mrand.NewPCG(seed, 2))
	cc, srv := newScripted(t, useTLS, Config{MaxReadFrameSize: 64 << 10})
	const n = 8
	sts := openStreams(t, cc, n)
	want := make([][]byte, n)
	var script []byte
	var enc bytes.Buffer
	henc := hpack.NewEncoder(&enc)
	ended := make([]bool, n)
	pings := 0
	for left := n; left > 0; {
		i := rng.IntN(n)
		if ended[i] {
			continue
		}
		st := sts[i]
		switch k := rng.IntN(20); {
		case k == 0:
			script = append(script, frames(func(fr *http2.Framer) { _ = fr.WritePing(false, [8]byte{byte(pings)}) })...)
			pings++
		case k == 1:
			script = append(script, frames(func(fr *http2.Framer) { _ = fr.WriteWindowUpdate(0, 1) })...)
		case k == 2 && len(want[i]) > 0:
			// Trailers end the stream, split in up to three frames.
			enc.Reset()
			_ = henc.WriteField(hpack.HeaderField{Name: "x-end", Value: fmt.Sprint("stream ", i, " seed ", seed)})
			_ = henc.WriteField(hpack.HeaderField{Name: "x-pad", Value: string(bytes.Repeat([]byte{'p'}, rng.IntN(100)))})
			blk := enc.Bytes()
			a, b := rng.IntN(len(blk)+1), 0
			b = a + rng.IntN(len(blk)-a+1)
			script = append(script, frames(func(fr *http2.Framer) {
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: blk[:a], EndStream: true, EndHeaders: false})
				_ = fr.WriteContinuation(st.id, false, blk[a:b])
				_ = fr.WriteContinuation(st.id, true, blk[b:])
			})...)
			ended[i] = true
			left--
		default:
			p := make([]byte, rng.IntN(40000))
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			end := rng.IntN(10) == 0 && len(want[i]) > 0
			script = append(script, dataFrame(st.id, p, end)...)
			want[i] = append(want[i], p...)
			if end {
				ended[i] = true
				left--
			}
		}
	}

	type got struct {
		b   []byte
		err error
	}
	results := make([]chan got, n)
	victims := map[int]bool{1: true, 4: true, 6: true}
	for i, st := range sts {
		results[i] = make(chan got, 1)
		rrng := mrand.New(mrand.NewPCG(seed, uint64(i)))
		go func() {
			var b []byte
			for {
				buf := make([]byte, 1+rrng.IntN(20000))
				k, err := st.Read(buf)
				b = append(b, buf[:k]...)
				if err != nil {
					results[i] <- got{b, err}
					return
				}
			}
		}()
		if victims[i] {
			time.AfterFunc(time.Duration(rng.IntN(30))*time.Millisecond, st.Close)
		}
	}
	srv.cut.mu.Lock()
	srv.cut.chunks = rng
	srv.cut.mu.Unlock()
	srv.write(script)
	for i := range sts {
		var r got
		select {
		case r = <-results[i]:
		case <-time.After(20 * time.Second):
			t.Fatalf("seed %d: stream %d: Read still waiting", seed, i)
		}
		if victims[i] {
			if r.err == io.EOF && !bytes.Equal(r.b, want[i]) {
				t.Errorf("seed %d: closed stream %d ended cleanly with %d of %d bytes", seed, i, len(r.b), len(want[i]))
			}
			continue
		}
		if r.err != io.EOF || !bytes.Equal(r.b, want[i]) {
			t.Errorf("seed %d: stream %d: %d bytes (want %d), %v", seed, i, len(r.b), len(want[i]), r.err)
		}
	}
	for range pings {
		select {
		case <-srv.pingAcks:
		case <-time.After(5 * time.Second):
			t.Fatalf("seed %d: a PING was not acked", seed)
		}
	}
	for _, st := range sts {
		st.Close()
	}
}

// TestConnectLeadsUntilContextEnds: a Connect reads its response itself
// when nobody else reads, and returns when its context ends though the
// response never comes; the connection goes on.
func TestConnectLeadsUntilContextEnds(t *testing.T) {
	t.Parallel()
	forBoth(t, func(t *testing.T, useTLS bool) {
		cc, srv := newScripted(t, useTLS, holdGrace)
		st := openStreams(t, cc, 1)[0] // the reader goroutine leaves the reading
		srv.mute.Store(true)
		if !cc.Reserve() {
			t.Fatal("Reserve failed")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		connected := make(chan error, 1)
		go func() {
			_, _, err := cc.Connect(ctx, "10.0.0.1:80", nil)
			connected <- err
		}()
		waitFor(t, cc, "Connect leads", func() bool { return cc.leader != nil && cc.leader != st && cc.inRead })
		cancel()
		select {
		case err := <-connected:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Connect: %v, want the context's end", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Connect still waiting after its context ended")
		}
		srv.mute.Store(false)
		rc := readFull(st, 2)
		srv.write(dataFrame(st.id, []byte("ok"), false))
		if r := result(t, rc, "after"); r.err != nil || string(r.b) != "ok" {
			t.Fatalf("Read after the failed Connect: %q, %v", r.b, r.err)
		}
		openStreams(t, cc, 1)
	})
}

// TestSinkReadLeadsWhenNobodyReads: the Read of a stream with a sink reads
// the connection itself when nobody does, writing its data to the sink
// as the reader goroutine would, and returns when the stream is closed.
func TestSinkReadLeadsWhenNobodyReads(t *testing.T) {
	t.Parallel()
	forBoth(t, func(t *testing.T, useTLS bool) {
		cc, srv := newScripted(t, useTLS, holdGrace)
		st := openStreams(t, cc, 1)[0]
		sinkW, sinkR := tcpPair(t)
		rc, err := sinkW.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var sunk atomic.Int64
		st.SetSink(rc, func(n int) { sunk.Add(int64(n)) })
		rd := readFull(st, 1)
		waitFor(t, cc, "the sink's Read leads", func() bool { return cc.leader == st && cc.inRead })
		var want []byte
		for i := range 50 {
			p := bytes.Repeat([]byte{byte(i)}, 1+i*300)
			want = append(want, p...)
			srv.write(dataFrame(st.id, p, false))
		}
		got := make([]byte, len(want))
		if _, err := io.ReadFull(sinkR, got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("sink got %d bytes, %v; want the %d sent, in order", len(got), err, len(want))
		}
		// The count follows the socket write: the bytes can be read first.
		waitFor(t, cc, "the sink counts every byte", func() bool { return sunk.Load() == int64(len(want)) })
		st.Close()
		if r := result(t, rd, "closed sink stream"); r.err == nil {
			t.Fatalf("Read returned %q without an error", r.b)
		}
	})
}
