package h2tun

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// fuzzScript reads a fuzz input as numbers, zero once it runs out.
type fuzzScript struct{ b []byte }

func (s *fuzzScript) u32() uint32 {
	var v [4]byte
	n := copy(v[:], s.b)
	s.b = s.b[n:]
	return binary.BigEndian.Uint32(v[:])
}

func (s *fuzzScript) u16() int {
	var v [2]byte
	n := copy(v[:], s.b)
	s.b = s.b[n:]
	return int(binary.BigEndian.Uint16(v[:]))
}

func (s *fuzzScript) bytes(n int) []byte {
	n = min(n, len(s.b))
	p := s.b[:n]
	s.b = s.b[n:]
	return p
}

// relay copies src to dst frame by frame after the preface (if any) and the
// first frame, then writes inject, then copies the rest: a peer's SETTINGS
// arrive first, and whatever the fuzzer wrote is read as frames that came
// from that peer.
func relay(dst, src net.Conn, preface bool, inject []byte) {
	defer func() { _ = dst.Close() }()
	if preface {
		if _, err := io.CopyN(dst, src, int64(len(http2.ClientPreface))); err != nil {
			return
		}
	}
	var h [9]byte
	if _, err := io.ReadFull(src, h[:]); err != nil {
		return
	}
	if _, err := dst.Write(h[:]); err != nil {
		return
	}
	n := int64(h[0])<<16 | int64(h[1])<<8 | int64(h[2])
	if _, err := io.CopyN(dst, src, n); err != nil {
		return
	}
	if len(inject) > 0 {
		if _, err := dst.Write(inject); err != nil {
			return
		}
	}
	_, _ = io.Copy(dst, src)
}

// FuzzPair runs our client against our server, through a relay that can
// insert arbitrary bytes after each side's SETTINGS: the fuzzer picks both
// ends' windows and frame sizes, how the client writes a payload that the
// server echoes, and the bytes injected each way. Without injected bytes the
// echo must come back intact; with them, either side may refuse the
// connection, but nothing may panic and nothing may stay stuck once both
// connections are closed (a frame writer looping on a hostile setting, a
// reader waiting forever).
func FuzzPair(f *testing.F) {
	var settings bytes.Buffer
	_ = http2.NewFramer(&settings, nil).WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 0})
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0xff, 0xff})
	// MAX_FRAME_SIZE 0 injected towards the server, then towards the client.
	inject := func(toServer bool) []byte {
		seed := make([]byte, 24, 64)
		n := byte(settings.Len())
		if toServer {
			seed = append(seed, 0, n)
			seed = append(seed, settings.Bytes()...)
			return append(seed, 0, 0, 0x40, 0)
		}
		seed = append(seed, 0, 0, 0, n)
		seed = append(seed, settings.Bytes()...)
		return append(seed, 0x40, 0)
	}
	f.Add(inject(true))
	f.Add(inject(false))
	f.Fuzz(func(t *testing.T, input []byte) {
		s := &fuzzScript{b: input}
		// Windows below a frame are legal but make a tunnel crawl a few
		// bytes per round trip; the fuzzer gets them from 16 KiB up.
		window := func() uint32 { return 16<<10 + s.u32()%(64<<20) }
		ccfg := Config{StreamWindow: window(), ConnWindow: window(), MaxReadFrameSize: s.u32()}
		scfg := Config{StreamWindow: window(), ConnWindow: window(), MaxReadFrameSize: s.u32()}
		toServer := s.bytes(s.u16() % 512)
		toClient := s.bytes(s.u16() % 512)
		var sizes []int
		total := 0
		for len(s.b) > 0 && total < 1<<20 {
			n := s.u16()%(64<<10) + 1
			sizes = append(sizes, n)
			total += n
		}
		payload := make([]byte, total)
		for i := range payload {
			payload[i] = byte(i * 7)
		}

		cc, cr := tcpPair(t) // client ↔ relay
		rs, ss := tcpPair(t) // relay ↔ server
		go relay(rs, cr, true, toServer)
		go relay(cr, rs, false, toClient)
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = Serve(ss, scfg, time.Now().Add(5*time.Second), echoHandler)
		}()

		var wg sync.WaitGroup
		var got bytes.Buffer
		var connErr, writeErr, readErr error
		client, err := NewClient(cc, ccfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !client.Reserve() {
				connErr = errClosed
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, status, err := client.Connect(ctx, "10.0.0.1:80", nil)
			if err != nil || status != 200 {
				connErr = errClosed
				if st != nil {
					st.Close()
				}
				return
			}
			defer st.Close()
			rdone := make(chan struct{})
			go func() {
				defer close(rdone)
				_, readErr = io.Copy(&got, st)
			}()
			p := payload
			for _, n := range sizes {
				if _, writeErr = st.Write(p[:n]); writeErr != nil {
					break
				}
				p = p[n:]
			}
			if writeErr == nil {
				writeErr = st.CloseWrite()
			}
			<-rdone
		}()

		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		injected := len(toServer)+len(toClient) > 0
		if injected {
			// A hostile peer may legitimately stall the tunnel (a zero
			// window, say); give it a moment, then end both connections.
			select {
			case <-finished:
			case <-time.After(500 * time.Millisecond):
			}
			_ = client.Close()
			_ = cc.Close()
			_ = ss.Close()
		}
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Fatalf("client still running (stuck?); input %x", input)
		}
		_ = client.Close()
		_ = ss.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatalf("server still running after the connection closed; input %x", input)
		}
		if injected {
			return
		}
		if connErr != nil || writeErr != nil || readErr != nil {
			t.Fatalf("clean connection failed: connect %v, write %v, read %v", connErr, writeErr, readErr)
		}
		if !bytes.Equal(got.Bytes(), payload) {
			t.Fatalf("echo returned %d bytes, want the %d sent", got.Len(), len(payload))
		}
	})
}
