package hbone

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDownstreamBodyBulkThenEnd: bulk data read through the pooled 64 KiB
// buffer arrives whole and in order, in frame-sized reads, and the way the
// downstream ended (FIN or RST) is reported after the data, not instead of it.
func TestDownstreamBodyBulkThenEnd(t *testing.T) {
	t.Parallel()
	for _, rst := range []bool{false, true} {
		ln := listen(t, "127.0.0.1:0")
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 1<<20+123)
		_, _ = rand.Read(want)
		go func() {
			_, _ = client.Write(want)
			if rst {
				reset(client)
			} else {
				_ = client.Close()
			}
		}()
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sent"})
		b := &downstreamBody{conn: server, r: newSockReader(rawConn(server)), done: make(chan struct{}), counter: c}
		var got bytes.Buffer
		p := make([]byte, 16<<10) // the transport's scratch buffer
		var rerr error
		for rerr == nil {
			var n int
			n, rerr = b.Read(p)
			if n > maxRecordData {
				t.Fatalf("read %d bytes, more than a frame (%d)", n, maxRecordData)
			}
			got.Write(p[:n])
		}
		switch {
		case rst && (errors.Is(rerr, io.EOF) || rerr == nil):
			t.Errorf("reset downstream ended with %v, want a reset error", rerr)
		case !rst && !errors.Is(rerr, io.EOF):
			t.Errorf("closed downstream ended with %v, want EOF", rerr)
		}
		// After a reset the kernel may discard what was not yet read; what
		// did arrive must be a prefix of what was sent.
		if (!rst && !bytes.Equal(got.Bytes(), want)) || !bytes.HasPrefix(want, got.Bytes()) {
			t.Errorf("rst=%v: got %d bytes, not the %d sent in order", rst, got.Len(), len(want))
		}
		if n := counter(c); int(n) != got.Len() {
			t.Errorf("rst=%v: sent-bytes counter %v, read %d", rst, n, got.Len())
		}
		_ = server.Close()
	}
}
