package hbone

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestServerZeroMaxFrameSize: a mesh peer announcing SETTINGS_MAX_FRAME_SIZE
// 0 and sending a request (here one refused with 400) gets GOAWAY
// PROTOCOL_ERROR; the server used to loop writing empty frames until it ran
// out of memory. Other connections keep working.
func TestServerZeroMaxFrameSize(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fr, tc := rawH2(t, e)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectHeaders("not an authority"), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ga *http2.GoAwayFrame
	for ga == nil {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY after SETTINGS_MAX_FRAME_SIZE=0: %v", err)
		}
		ga, _ = f.(*http2.GoAwayFrame)
	}
	if ga.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR", ga.ErrCode)
	}
	waitFor(t, func() bool { return counter(e.sm.h2Errors.WithLabelValues("conn_PROTOCOL_ERROR")) == 1 })
	c, err := e.dial(e.echoAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "ok"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("tunnel on another connection: %q, %v", buf, err)
	}
}

// TestDialerZeroMaxFrameSize: a hostile server with a valid mesh certificate
// announces SETTINGS_MAX_FRAME_SIZE 0 and then accepts the CONNECT. The
// dialer must refuse the connection with GOAWAY PROTOCOL_ERROR and fail the
// tunnel; it used to loop writing empty DATA frames until out of memory.
func TestDialerZeroMaxFrameSize(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln := listen(t, "127.0.0.1:0")
	srvCert := issue(t, e.ca, serverID)
	goAway := make(chan http2.ErrCode, 1)
	go func() {
		defer close(goAway)
		raw, err := ln.Accept()
		if err != nil {
			return
		}
		defer raw.Close()
		tc := tls.Server(raw, &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{*srvCert}})
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(tc, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
		fr := http2.NewFramer(tc, tc)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		if fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 0}) != nil {
			return
		}
		var resp bytes.Buffer
		_ = hpack.NewEncoder(&resp).WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Logf("hostile server: %v", err)
				return
			}
			switch f := f.(type) {
			case *http2.MetaHeadersFrame:
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: resp.Bytes(), EndHeaders: true})
			case *http2.GoAwayFrame:
				goAway <- f.ErrCode
				return
			}
		}
	}()
	tgt := e.target(e.echoAddr)
	tgt.Gateway = addrPortOf(ln.Addr())
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := e.dialer.Dial(ctx, tgt)
		if err != nil {
			res <- err
			return
		}
		defer c.Close()
		_, err = c.Write(make([]byte, 64<<10))
		res <- err
	}()
	select {
	case err := <-res:
		if err == nil {
			t.Error("a tunnel through a server announcing MAX_FRAME_SIZE 0 worked")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Dial/Write did not return (stuck writing?)")
	}
	if code, ok := <-goAway; !ok || code != http2.ErrCodeProtocol {
		t.Fatalf("server got GOAWAY %v (%v), want PROTOCOL_ERROR", code, ok)
	}
	if n := counter(e.cm.h2Errors.WithLabelValues("conn_PROTOCOL_ERROR")); n != 1 {
		t.Errorf("dialer h2 errors conn_PROTOCOL_ERROR = %v, want 1", n)
	}
}
