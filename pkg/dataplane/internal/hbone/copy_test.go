package hbone

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSpliceSocketBulkThenEnd: bulk data spliced from a socket through the
// pooled 64 KiB buffers (as Proxy sends a downstream's data into its stream)
// arrives whole and in order, and the way the socket ended (FIN or RST) is
// reported after the data, not instead of it.
func TestSpliceSocketBulkThenEnd(t *testing.T) {
	t.Parallel()
	for _, rst := range []bool{false, true} {
		client, server := tcpPair(t)
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
		var got bytes.Buffer
		rerr, writeFailed := splice(&got, server, c)
		switch {
		case writeFailed:
			t.Errorf("rst=%v: a write to a buffer failed: %v", rst, rerr)
		case rst && (errors.Is(rerr, io.EOF) || rerr == nil):
			t.Errorf("reset socket ended with %v, want a reset error", rerr)
		case !rst && !errors.Is(rerr, io.EOF):
			t.Errorf("closed socket ended with %v, want EOF", rerr)
		}
		// After a reset the kernel may discard what was not yet read; what
		// did arrive must be a prefix of what was sent.
		if (!rst && !bytes.Equal(got.Bytes(), want)) || !bytes.HasPrefix(want, got.Bytes()) {
			t.Errorf("rst=%v: got %d bytes, not the %d sent in order", rst, got.Len(), len(want))
		}
		if n := counter(c); int(n) != got.Len() {
			t.Errorf("rst=%v: bytes counter %v, spliced %d", rst, n, got.Len())
		}
		_ = server.Close()
	}
}
