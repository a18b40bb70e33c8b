package h2tun

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzServerFrames feeds arbitrary bytes after a valid preface and SETTINGS
// to a server whose handler echoes. Whatever the frames, the server must not
// panic and must finish once the client goes away (no stuck reader, writer
// or handler).
func FuzzServerFrames(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	_ = enc.WriteField(hpack.HeaderField{Name: ":method", Value: "CONNECT"})
	_ = enc.WriteField(hpack.HeaderField{Name: ":authority", Value: "10.0.0.1:80"})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, false, []byte("hello"))
	_ = fr.WriteWindowUpdate(1, 1000)
	_ = fr.WritePing(false, [8]byte{1})
	_ = fr.WriteData(1, true, nil)
	_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 5, 9, 4, 0, 0, 0, 1, 1, 2, 3, 4, 5}) // a stray CONTINUATION
	f.Fuzz(func(t *testing.T, frames []byte) {
		cs, ss := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = Serve(ss, Config{}, time.Now().Add(5*time.Second), echoHandler)
		}()
		go func() { _, _ = io.Copy(io.Discard, cs) }()
		var hello bytes.Buffer
		hello.WriteString(http2.ClientPreface)
		_ = http2.NewFramer(&hello, nil).WriteSettings()
		_, _ = cs.Write(hello.Bytes())
		_, _ = cs.Write(frames)
		_ = cs.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("server still running after the client closed; input %x", frames)
		}
	})
}
