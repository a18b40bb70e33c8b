package h2tun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/net/http2"
)

// Who reads a client connection: leader/follower.
//
// A small round trip through a tunnel is a chain of goroutines, each woken
// by the one before it; on a machine with few CPUs a wakeup that finds a CPU
// idle costs tens of µs, more than the work of the hop. On a client
// connection one link of that chain was the reader goroutine waking the
// goroutine waiting in Stream.Read. Instead, a Read that waits for data
// while nobody reads the connection reads and dispatches frames itself (it
// leads), and returns as soon as its own data is in. Reads that wait
// meanwhile follow: the leader delivers their data as the reader goroutine
// would, and when it returns it hands the reading to one of them.
//
// With no follower, the reading is left to nobody for about leadGrace, since the
// caller of Read usually comes back at once (a request, then the next
// Read), and then goes back to the reader goroutine, which reads whenever
// no Read does: what the peer sends unasked (PING, SETTINGS, GOAWAY,
// RST_STREAM, a closed socket) is handled within leadGrace. A goroutine that
// waits for anything else from the peer (Connect's response, flow-control
// window, a PING's ack, the data of a stream with a sink) counts itself in
// waiting and has the reader goroutine read at once; while any does, the
// reading is never left to nobody. The reader goroutine itself gives the
// reading up after a frame that leaves a Read waiting to follow, or that
// woke a Read that may lead (its caller will likely Read again).
//
// A leader waiting in the socket read whose stream fails meanwhile (Close or
// Reset from another goroutine, a stall) is interrupted with a read deadline
// in the past. frameReader keeps what the framer had read of a frame cut
// short (the TLS connection keeps a partial record itself), so the next
// reader goes on where it stopped. Inside a header block, whose fragments
// the HPACK decoder has already taken, the interrupt waits for the block's
// end.
//
// Reads of streams with a sink (SetSink) lead only when nobody reads (the
// tunnel's first Read after Connect led, say): they do not follow, since
// whoever reads writes their data to the sink without waking them, which
// their own goroutine reading could not better. Server connections are
// read by their reader goroutine alone, and so is a connection whose
// net.Conn has no read deadline.

// leadGrace is how long the reading stays with nobody after a Read that
// led returns, waiting for the next Read, before the reader goroutine
// takes it back (at most twice that: see armGraceLocked). Tests change it
// per connection (Config.leadGrace).
const leadGrace = 5 * time.Millisecond

// pastDeadline interrupts a read.
var pastDeadline = time.Unix(1, 0)

// readLoop is the connection's reader goroutine: it reads and dispatches
// frames whenever it has the reading (always, on a server connection), and
// never blocks on anything but the socket.
func (c *Conn) readLoop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for !c.bgLeads && !c.readStopped && !c.closed {
			c.bgCond.Wait()
		}
		if !c.bgLeads {
			return
		}
		c.yieldBG = false
		c.mu.Unlock()
		ok := c.dispatch(c.fr.ReadFrame())
		for ok && !c.leads {
			ok = c.dispatch(c.fr.ReadFrame())
		}
		c.mu.Lock()
		if !ok {
			c.stopReadingLocked()
			return
		}
		if len(c.followers) > 0 || c.yieldBG && c.waiting == 0 {
			c.bgLeads = false
			c.passLocked()
		}
	}
}

// mayLeadLocked reports whether s's Read may read the connection now: it
// was handed the reading, or nobody has it. A Read of a stream with a sink
// leads too when nobody reads (rather than wake the reader goroutine), but
// does not follow: whoever reads writes its data to the sink without
// waking it.
func (c *Conn) mayLeadLocked(s *Stream) bool {
	return c.leader == s || c.leads && c.leader == nil && !c.bgLeads && !c.readStopped && !c.closed
}

// canLeadLocked reports whether s's Reads follow a reader and are handed
// the reading rather than wait for the reader goroutine.
func (c *Conn) canLeadLocked(s *Stream) bool {
	return c.leads && s.sink == nil
}

// awaitedLocked reports whether what s's waiting goroutine waits for is in:
// Connect's response, or a Read's data or error.
func (s *Stream) awaitedLocked() bool {
	if s.connecting {
		return s.respClosed || s.ctxDone
	}
	return s.rn > 0 || s.rbuf.n > 0 || s.rerr != nil
}

// awaitDataLocked waits until s has data or an error, leading when it may.
func (s *Stream) awaitDataLocked() {
	c := s.c
	for !s.awaitedLocked() {
		if c.mayLeadLocked(s) {
			c.leadLocked(s)
			continue
		}
		if c.canLeadLocked(s) {
			s.following = true
			c.followers = append(c.followers, s)
			s.cond.Wait()
			c.unfollowLocked(s)
			continue
		}
		c.waitForPeerLocked()
		s.cond.Wait()
		c.waiting--
	}
	if c.leader == s {
		// Handed the reading, and failed before it could read.
		c.passLocked()
	}
}

// unfollowLocked takes s off the followers.
func (c *Conn) unfollowLocked(s *Stream) {
	if !s.following {
		return
	}
	s.following = false
	for i, f := range c.followers {
		if f == s {
			copy(c.followers[i:], c.followers[i+1:])
			c.followers[len(c.followers)-1] = nil
			c.followers = c.followers[:len(c.followers)-1]
			return
		}
	}
}

// leadLocked reads and dispatches frames until what s waits for is in,
// then hands the reading on.
func (c *Conn) leadLocked(s *Stream) {
	c.leader = s
	for !s.awaitedLocked() {
		c.inRead = true
		c.mu.Unlock()
		f, err := c.fr.ReadFrame()
		c.mu.Lock()
		c.inRead = false
		if c.intr.Load() {
			// Whether or not it cut the read short, the deadline must be
			// gone before anyone reads again.
			_ = c.nc.SetReadDeadline(time.Time{})
			c.intr.Store(false)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue // frameReader kept the frame's beginning
			}
		}
		c.mu.Unlock()
		ok := c.dispatch(f, err)
		c.mu.Lock()
		if !ok {
			c.stopReadingLocked()
			return
		}
		c.ledFrames++
	}
	c.leader = nil
	c.passLocked()
}

// passLocked hands the reading, which its holder gives up, to a follower;
// with none, to the reader goroutine at once if a goroutine waits for the
// peer, after leadGrace otherwise.
func (c *Conn) passLocked() {
	c.leader = nil
	c.flushWakesLocked()
	if c.readStopped || c.closed {
		c.bgCond.Broadcast()
		return
	}
	for len(c.followers) > 0 {
		f := c.followers[0]
		copy(c.followers, c.followers[1:])
		c.followers[len(c.followers)-1] = nil
		c.followers = c.followers[:len(c.followers)-1]
		f.following = false
		if !f.awaitedLocked() {
			c.leader = f
			f.cond.Broadcast()
			return
		}
	}
	if c.waiting > 0 {
		c.wakeReaderLocked()
		return
	}
	c.released++
	if !c.graceArmed {
		c.armGraceLocked()
	}
}

// armGraceLocked starts the grace timer. It is not stopped when a Read
// takes the reading, nor started again at each release while it runs:
// setting a timer can wake the runtime's network poller thread (runtime's
// wakeNetPoller), a wakeup per round trip of the kind this file removes.
// So the reading goes back to the reader goroutine between leadGrace and
// twice that after it was left to nobody.
func (c *Conn) armGraceLocked() {
	c.graceArmed, c.graceFrom = true, c.released
	if c.grace == nil {
		c.grace = time.AfterFunc(c.cfg.leadGrace, c.onGrace)
		return
	}
	c.grace.Reset(c.cfg.leadGrace)
}

func (c *Conn) stopGraceLocked() {
	if c.grace != nil {
		c.grace.Stop()
	}
	c.graceArmed = false
}

// onGrace gives the reading to the reader goroutine if nobody has had it
// since the timer started.
func (c *Conn) onGrace() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.graceArmed = false
	switch {
	case c.leader != nil || c.bgLeads || c.readStopped || c.closed:
	case c.released != c.graceFrom:
		c.armGraceLocked() // read meanwhile and left again
	default:
		c.wakeReaderLocked()
	}
}

// wakeReaderLocked gives the reading to the reader goroutine.
func (c *Conn) wakeReaderLocked() {
	c.bgLeads = true
	c.bgCond.Signal()
}

// awaitResponseLocked waits for the response to s's CONNECT, leading when
// it may, until ctx ends; the caller then waits for s.resp.
func (s *Stream) awaitResponseLocked(ctx context.Context) {
	c := s.c
	if s.respClosed {
		return // the reader had it before Connect got here
	}
	if !c.mayLeadLocked(s) {
		s.respWait = true
		c.waitForPeerLocked()
		return
	}
	s.connecting = true
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		s.ctxDone = true
		if c.leader == s && c.inRead {
			c.interruptLocked()
		}
		c.mu.Unlock()
	})
	c.leadLocked(s)
	s.connecting = false
	c.mu.Unlock()
	stop()
	c.mu.Lock()
}

// waitForPeerLocked is called by a goroutine about to wait for something
// from the peer that it does not read itself: it makes sure that someone
// reads. The caller decrements waiting once it has stopped waiting.
func (c *Conn) waitForPeerLocked() {
	c.waiting++
	if c.leads && c.leader == nil && !c.bgLeads && !c.readStopped && !c.closed {
		c.wakeReaderLocked()
	}
}

// interruptLocked cuts short the leader's socket read: its stream failed.
func (c *Conn) interruptLocked() {
	if !c.intr.Load() {
		c.intr.Store(true)
		_ = c.nc.SetReadDeadline(pastDeadline)
	}
}

// stopReadingLocked ends the reading for good: the connection failed
// (whoever failed it woke every stream with the error).
func (c *Conn) stopReadingLocked() {
	c.readStopped = true
	c.leader, c.bgLeads = nil, false
	c.stopGraceLocked()
	c.flushWakesLocked()
	c.bgCond.Broadcast()
}

// dispatch handles what ReadFrame returned; false when the connection
// failed and reading must stop.
func (c *Conn) dispatch(f http2.Frame, err error) bool {
	if err != nil {
		var se http2.StreamError
		if errors.As(err, &se) {
			c.cfg.CountError("stream_" + se.Code.String())
			c.resetStream(se.StreamID, se.Code)
			return true
		}
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			c.connError(err)
			return false
		}
		if errors.Is(err, http2.ErrFrameTooLarge) {
			c.connError(http2.ConnectionError(http2.ErrCodeFrameSize))
			return false
		}
		c.close(fmt.Errorf("h2 read: %w", err))
		return false
	}
	if err := c.handle(f); err != nil {
		c.connError(err)
		return false
	}
	if c.ctlOverflow.Load() {
		c.cfg.CountError("control_flood")
		c.connError(http2.ConnectionError(http2.ErrCodeEnhanceYourCalm))
		return false
	}
	return true
}

// frameReader is what the framer of a connection with leaders reads from.
// It follows the frames going by, so that when an interrupt cuts a read
// short it can keep the part of the frame the framer had taken, and give it
// again to the next ReadFrame. The framer reads a frame's header and then
// its payload each with io.ReadFull, never more than the part it is at.
type frameReader struct {
	c      *Conn
	hdr    [FrameHeaderLen]byte // the current frame's header
	hn     int                  // bytes of hdr given out
	left   int                  // its payload length, once hdr is complete
	pay    []byte               // where its payload is read to (the framer's buffer)
	pn     int                  // payload bytes given out
	block  bool                 // inside a header block
	replay []byte               // the beginning of a frame to give out again
	saved  []byte               // replay's memory
}

func (r *frameReader) Read(p []byte) (int, error) {
	if len(r.replay) > 0 {
		n := copy(p, r.replay)
		r.replay = r.replay[n:]
		r.advance(p, n)
		return n, nil
	}
	for {
		n, err := r.c.nc.Read(p)
		interrupted := err != nil && r.c.intr.Load() && errors.Is(err, os.ErrDeadlineExceeded)
		if n > 0 {
			r.advance(p, n)
			if interrupted {
				err = nil // the next read meets the deadline again
			}
			return n, err
		}
		if interrupted {
			if r.block {
				// The HPACK decoder has taken the block's first fragments:
				// the block cannot be read again, so it is read to its end.
				_ = r.c.nc.SetReadDeadline(time.Time{})
				continue
			}
			r.save()
		}
		return n, err
	}
}

// advance follows n bytes given out into p.
func (r *frameReader) advance(p []byte, n int) {
	for n > 0 {
		if r.hn < FrameHeaderLen {
			k := copy(r.hdr[r.hn:], p[:n])
			r.hn += k
			p, n = p[k:], n-k
			if r.hn == FrameHeaderLen {
				r.left = int(r.hdr[0])<<16 | int(r.hdr[1])<<8 | int(r.hdr[2])
				t := http2.FrameType(r.hdr[3])
				if (t == http2.FrameHeaders || t == http2.FramePushPromise) && !http2.Flags(r.hdr[4]).Has(http2.FlagHeadersEndHeaders) {
					r.block = true
				}
				if r.left == 0 {
					r.endFrame()
				}
			}
			continue
		}
		if r.pn == 0 {
			r.pay = p // io.ReadFull's first read of the payload starts it
		}
		k := min(n, r.left-r.pn)
		r.pn += k
		p, n = p[k:], n-k
		if r.pn == r.left {
			r.endFrame()
		}
	}
}

func (r *frameReader) endFrame() {
	if http2.FrameType(r.hdr[3]) == http2.FrameContinuation && http2.Flags(r.hdr[4]).Has(http2.FlagContinuationEndHeaders) {
		r.block = false
	}
	r.hn, r.left, r.pay, r.pn = 0, 0, nil, 0
}

// save keeps what was given out of the current frame, for replay: the
// framer drops it when its read fails.
func (r *frameReader) save() {
	if r.hn == 0 {
		return
	}
	b := append(r.saved[:0], r.hdr[:r.hn]...)
	if r.hn == FrameHeaderLen {
		b = append(b, r.pay[:r.pn]...)
	}
	r.saved, r.replay = b, b
	r.hn, r.left, r.pay, r.pn = 0, 0, nil, 0
}
