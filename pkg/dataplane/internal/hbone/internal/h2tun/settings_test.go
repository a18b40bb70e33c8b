package h2tun

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// badSettings are SETTINGS values RFC 9113 6.5.2 forbids, with the
// connection error each must cause.
var badSettings = []struct {
	s    http2.Setting
	code http2.ErrCode
}{
	{http2.Setting{ID: http2.SettingMaxFrameSize, Val: 0}, http2.ErrCodeProtocol},
	{http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16<<10 - 1}, http2.ErrCodeProtocol},
	{http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 24}, http2.ErrCodeProtocol},
	{http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31}, http2.ErrCodeFlowControl},
	{http2.Setting{ID: http2.SettingEnablePush, Val: 2}, http2.ErrCodeProtocol},
}

// waitDone fails the test when done is not closed in time: a server or
// client stuck in a write loop must fail the test, not hang it.
func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not finish (stuck writing?)", what)
	}
}

// goAwayWithin reads frames until a GOAWAY, giving up after a while.
func goAwayWithin(t *testing.T, fr *http2.Framer, c interface{ SetReadDeadline(time.Time) error }) *http2.GoAwayFrame {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	ga, err := readUntilGoAway(fr)
	if err != nil {
		t.Fatalf("no GOAWAY: %v", err)
	}
	return ga
}

// TestServerRefusesBadSettings: a client announcing a forbidden SETTINGS
// value, in its first SETTINGS or a later one, gets GOAWAY with the code the
// RFC names, whatever requests it sends alongside. A MAX_FRAME_SIZE of 0 used
// to make the server's response and DATA writes loop forever.
func TestServerRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for _, bs := range badSettings {
		for _, later := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v=%d/later=%v", bs.s.ID, bs.s.Val, later), func(t *testing.T) {
				t.Parallel()
				cs, cnt, done := serveTCP(t, Config{}, echoHandler)
				fr := http2.NewFramer(cs, cs)
				fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				go func() {
					_, _ = io.WriteString(cs, http2.ClientPreface)
					if later {
						_ = fr.WriteSettings()
						_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock("10.0.0.1:80"), EndHeaders: true})
						_ = fr.WriteSettings(bs.s)
						// The echo makes the server write DATA after the
						// bad SETTINGS.
						for range 3 {
							_ = fr.WriteData(1, false, bytes.Repeat([]byte("x"), 16<<10))
						}
					} else {
						_ = fr.WriteSettings(bs.s)
					}
					_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: connectBlock("10.0.0.1:80"), EndHeaders: true})
					_ = fr.WriteData(3, false, []byte("hello"))
				}()
				ga := goAwayWithin(t, fr, cs)
				if ga.ErrCode != bs.code {
					t.Errorf("GOAWAY %v, want %v", ga.ErrCode, bs.code)
				}
				_ = cs.Close()
				waitDone(t, done, "Serve")
				if cnt.get("conn_"+bs.code.String()) != 1 {
					t.Errorf("connection error not counted: %v", cnt.m)
				}
			})
		}
	}
}

// TestServerRefusesWindowOverflowFromSettings: a SETTINGS change of
// INITIAL_WINDOW_SIZE that takes an open stream's send window beyond
// 2^31-1 is a FLOW_CONTROL_ERROR (RFC 9113 6.9.2).
func TestServerRefusesWindowOverflowFromSettings(t *testing.T) {
	t.Parallel()
	cs, _, done := serveTCP(t, Config{}, echoHandler)
	fr, hello := rawClient(t, cs)
	go func() {
		_ = hello()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock("10.0.0.1:80"), EndHeaders: true})
		// Stream 1's send window becomes 2^31-1 ...
		_ = fr.WriteWindowUpdate(1, 1<<31-1-initialWindow)
		// ... and one more byte of initial window overflows it.
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: initialWindow + 1})
	}()
	if ga := goAwayWithin(t, fr, cs); ga.ErrCode != http2.ErrCodeFlowControl {
		t.Errorf("GOAWAY %v, want FLOW_CONTROL_ERROR", ga.ErrCode)
	}
	_ = cs.Close()
	waitDone(t, done, "Serve")
}

// TestClientRefusesBadSettings: the dialing side against a server that
// announces a forbidden value (then answers 200 as if nothing happened):
// the client sends GOAWAY and its Connect or Write fails instead of looping.
func TestClientRefusesBadSettings(t *testing.T) {
	t.Parallel()
	cases := append(badSettings[:len(badSettings):len(badSettings)], struct {
		s    http2.Setting
		code http2.ErrCode
	}{http2.Setting{ID: http2.SettingEnablePush, Val: 1}, http2.ErrCodeProtocol}) // a server must not enable push
	for _, bs := range cases {
		t.Run(fmt.Sprintf("%v=%d", bs.s.ID, bs.s.Val), func(t *testing.T) {
			t.Parallel()
			cs, ss := tcpPair(t)
			cnt := &counts{m: map[string]int{}}
			cc, err := NewClient(cs, Config{CountError: cnt.add})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cc.Close() })
			fr := http2.NewFramer(ss, ss)
			fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
			if _, err := io.ReadFull(ss, make([]byte, len(http2.ClientPreface))); err != nil {
				t.Fatal(err)
			}
			// The hostile server: bad SETTINGS, then a 200 for stream 1 once
			// the request arrives, so that the client writes DATA after
			// (and having read) the bad value.
			if err := fr.WriteSettings(bs.s); err != nil {
				t.Fatal(err)
			}
			var resp bytes.Buffer
			_ = hpack.NewEncoder(&resp).WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
			goAway := make(chan *http2.GoAwayFrame, 1)
			go func() {
				defer close(goAway)
				_ = ss.SetReadDeadline(time.Now().Add(10 * time.Second))
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *http2.MetaHeadersFrame:
						_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: resp.Bytes(), EndHeaders: true})
					case *http2.GoAwayFrame:
						goAway <- f
						return
					}
				}
			}()

			res := make(chan error, 1)
			go func() {
				if !cc.Reserve() {
					res <- errClosed
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				st, _, err := cc.Connect(ctx, "10.0.0.1:80", nil)
				if err != nil {
					res <- err
					return
				}
				defer st.Close()
				_, err = st.Write(bytes.Repeat([]byte("x"), 40<<10))
				res <- err
			}()
			select {
			case err := <-res:
				if err == nil {
					t.Error("Connect and Write succeeded on a connection with a forbidden setting")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Connect/Write did not return (stuck writing?)")
			}
			ga := <-goAway
			if ga == nil || ga.ErrCode != bs.code {
				t.Fatalf("server got GOAWAY %v, want code %v", ga, bs.code)
			}
			if cnt.get("conn_"+bs.code.String()) != 1 {
				t.Errorf("connection error not counted: %v", cnt.m)
			}
		})
	}
}

// TestClientWantsSettingsFirst: a server whose first frame is not SETTINGS
// (RFC 9113 3.4) gets a PROTOCOL_ERROR.
func TestClientWantsSettingsFirst(t *testing.T) {
	t.Parallel()
	cs, ss := tcpPair(t)
	cc, err := NewClient(cs, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	fr := http2.NewFramer(ss, ss)
	if _, err := io.ReadFull(ss, make([]byte, len(http2.ClientPreface))); err != nil {
		t.Fatal(err)
	}
	if err := fr.WritePing(false, [8]byte{}); err != nil {
		t.Fatal(err)
	}
	if ga := goAwayWithin(t, fr, ss); ga.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR", ga.ErrCode)
	}
}
