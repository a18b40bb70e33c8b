package hbone

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

// serverLimits bound what peers can make the inbound server hold. In each field
// zero keeps the default and a negative value removes the limit.
type serverLimits struct {
	// ConnsPerIdentity and ConnsPerSource cap concurrent HBONE connections
	// per peer identity and per source IP; a connection beyond either is
	// closed after (identity) or before (source) the TLS handshake.
	ConnsPerIdentity, ConnsPerSource int
	// TunnelsPerIdentity and TunnelsPerSource cap concurrent CONNECT
	// tunnels across all connections; a CONNECT beyond either is answered
	// 429 Too Many Requests.
	TunnelsPerIdentity, TunnelsPerSource int
	// UpstreamDials caps upstream dials in progress, all peers together; a
	// CONNECT waits for a slot within the upstream timeout, then gets 503.
	UpstreamDials int
	// StallTimeout bounds how long a write may make no progress (at least
	// half of it, at most all), on either side: a tunnel whose reader stops reading is reset, an h2 connection
	// whose peer stops reading it is closed, and so is an upstream or
	// downstream socket write that does not complete.
	StallTimeout time.Duration
}

// Default limits. A peer proxy multiplexes up to 100 tunnels per
// connection, so a few connections per identity carry a busy workload; the
// tunnel caps sit well above what one pod opens to one node, and the stall
// timeout well above a TCP retransmission backoff.
const (
	defaultConnsPerIdentity   = 256
	defaultConnsPerSource     = 256
	defaultTunnelsPerIdentity = 4096
	defaultTunnelsPerSource   = 4096
	defaultUpstreamDials      = 1024
	defaultStallTimeout       = 30 * time.Second
)

// withLimits sets the inbound limits and the stall timeout (which the
// dialer applies too).
func withLimits(l serverLimits) Option { return func(c *config) { c.limits = l } }

func (l serverLimits) withDefaults() serverLimits {
	def := func(v *int, d int) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	def(&l.ConnsPerIdentity, defaultConnsPerIdentity)
	def(&l.ConnsPerSource, defaultConnsPerSource)
	def(&l.TunnelsPerIdentity, defaultTunnelsPerIdentity)
	def(&l.TunnelsPerSource, defaultTunnelsPerSource)
	def(&l.UpstreamDials, defaultUpstreamDials)
	switch {
	case l.StallTimeout == 0:
		l.StallTimeout = defaultStallTimeout
	case l.StallTimeout < 0:
		l.StallTimeout = 0
	}
	return l
}

// counts is a set of per-key counters with a cap (0: none).
type counts[K comparable] struct {
	mu  sync.Mutex
	max int
	m   map[K]int
}

func newCounts[K comparable](max int) *counts[K] { return &counts[K]{max: max, m: map[K]int{}} }

// acquire takes one for k; false when k is at the cap.
func (c *counts[K]) acquire(k K) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max > 0 && c.m[k] >= c.max {
		return false
	}
	c.m[k]++
	return true
}

func (c *counts[K]) release(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[k] <= 1 {
		delete(c.m, k)
		return
	}
	c.m[k]--
}

// limiter holds the server's counters.
type limiter struct {
	connsByID, tunnelsByID   *counts[identity.Identity]
	connsBySrc, tunnelsBySrc *counts[netip.Addr]
	dials                    chan struct{} // nil: no cap
}

func newLimiter(l serverLimits) *limiter {
	lm := &limiter{
		connsByID: newCounts[identity.Identity](l.ConnsPerIdentity), tunnelsByID: newCounts[identity.Identity](l.TunnelsPerIdentity),
		connsBySrc: newCounts[netip.Addr](l.ConnsPerSource), tunnelsBySrc: newCounts[netip.Addr](l.TunnelsPerSource),
	}
	if l.UpstreamDials > 0 {
		lm.dials = make(chan struct{}, l.UpstreamDials)
	}
	return lm
}

// acquireTunnel takes a tunnel slot for both the identity and the source;
// the reason names the limit hit.
func (lm *limiter) acquireTunnel(id identity.Identity, src netip.Addr) (release func(), reason string) {
	if !lm.tunnelsByID.acquire(id) {
		return nil, "tunnels_per_identity"
	}
	if !lm.tunnelsBySrc.acquire(src) {
		lm.tunnelsByID.release(id)
		return nil, "tunnels_per_source"
	}
	return func() { lm.tunnelsByID.release(id); lm.tunnelsBySrc.release(src) }, ""
}

// acquireDial waits for an upstream dial slot until ctx ends.
func (lm *limiter) acquireDial(ctx context.Context) (release func(), ok bool) {
	if lm.dials == nil {
		return func() {}, true
	}
	select {
	case lm.dials <- struct{}{}:
		return func() { <-lm.dials }, true
	case <-ctx.Done():
		return nil, false
	}
}

// stallWriter bounds each write to a socket by the stall timeout: a peer
// that stops reading makes the write fail instead of holding its goroutine
// (and the tunnel) forever. Only the splice writes through it (one
// goroutine); the socket itself stays a *net.TCPConn for half-close, reset
// and inline delivery. The deadline moves only once half the timeout has
// passed (a timer update per write would cost more), so a stuck write fails
// after between half and all of the timeout.
type stallWriter struct {
	c     net.Conn
	stall time.Duration
	set   time.Time
}

func (w *stallWriter) Write(p []byte) (int, error) {
	if now := time.Now(); now.After(w.set.Add(w.stall / 2)) {
		w.set = now
		_ = w.c.SetWriteDeadline(now.Add(w.stall))
	}
	return w.c.Write(p)
}

// withStall returns c as a writer whose writes are bounded by d (0: c).
func withStall(c net.Conn, d time.Duration) io.Writer {
	if d <= 0 {
		return c
	}
	return &stallWriter{c: c, stall: d}
}
