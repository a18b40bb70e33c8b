package h2tun

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// errEOF marks a read side ended by END_STREAM (reads return io.EOF once
// the buffer is drained).
var errEOF = errors.New("h2 stream ended")

// Stream is one tunnel. Read and Write may be called from two goroutines;
// the owner must call Close when done with it.
type Stream struct {
	c    *Conn
	id   uint32
	cond sync.Cond // on c.mu: data, window, state changes

	// Everything below is guarded by c.mu.
	rbuf chunkQueue
	// rdst is the buffer of a Read waiting for data and rn what the reader
	// goroutine copied into it: data goes straight from the frame to the
	// caller, not through rbuf, when the caller keeps up.
	rdst []byte
	rn   int
	// sink is the socket the stream's Read data is copied to (SetSink):
	// while that Read waits with nothing buffered, the connection's reader
	// writes DATA straight to it, without waking the Read's goroutine.
	sink      syscall.RawConn
	sinkWrote func(n int)
	sinkTry   func(fd uintptr) bool
	sinkData  []byte
	sinkN     int
	// held is full-size DATA for the sink that onData keeps until the
	// burst ends, to write it with one syscall (nil when none).
	held         *[]byte
	wakeDeferred bool  // flushWakes wakes the Read
	queued       bool  // on the connection's wakes list
	following    bool  // on the connection's followers (lead.go)
	connecting   bool  // Connect leads, waiting for the response
	ctxDone      bool  // Connect's context ended
	respWait     bool  // Connect waits for the response in waiting
	respSent     bool  // server: response HEADERS written
	rerr         error // errEOF, a *StreamError, ErrRefused or the connection's error
	werr         error
	recvWindow   int32  // what the peer may still send
	unacked      uint32 // consumed since our last stream WINDOW_UPDATE
	sendWindow   int32
	waitingSend  bool
	stall        *time.Timer // StallTimeout while waitingSend
	stallSince   time.Time
	localDone    bool // END_STREAM sent
	remoteDone   bool // END_STREAM received
	localReset   bool
	peerReset    bool
	finished     bool // removed from the connection's stream map
	closed       bool // Close called
	status       int  // client: response status
	resp         chan struct{}
	respClosed   bool
}

// ID returns the stream ID.
func (s *Stream) ID() uint32 { return s.id }

func (s *Stream) wakeLocked() {
	s.cond.Broadcast()
	if c := s.c; c.leader == s && c.inRead && s.rerr != nil {
		c.interruptLocked() // its Read is reading the socket: it must return
	}
	if s.resp != nil && !s.respClosed && (s.status != 0 || s.finished || s.rerr != nil && s.rerr != errEOF) {
		s.respClosed = true
		close(s.resp)
		if s.respWait {
			s.respWait = false
			s.c.waiting--
		}
	}
}

func (s *Stream) finishLocked() {
	if !s.finished {
		s.finished = true
		delete(s.c.streams, s.id)
	}
	s.wakeLocked()
}

func (s *Stream) finishIfDoneLocked() {
	if s.localDone && s.remoteDone {
		s.finishLocked()
	}
}

// consumedLocked credits n consumed bytes back to the peer, batching the
// WINDOW_UPDATEs to one per half window (stream and connection).
func (s *Stream) consumedLocked(n uint32) {
	c := s.c
	c.connAckLocked(n)
	if s.remoteDone || s.finished {
		return
	}
	s.unacked += n
	if s.unacked >= c.cfg.StreamWindow/2 {
		c.queueLocked(ctlFrame{typ: http2.FrameWindowUpdate, streamID: s.id, val: s.unacked})
		s.recvWindow += int32(s.unacked)
		s.unacked = 0
	}
}

func (c *Conn) connAckLocked(n uint32) {
	c.recvConsumed += n
	if c.recvConsumed >= c.cfg.ConnWindow/2 {
		c.queueLocked(ctlFrame{typ: http2.FrameWindowUpdate, val: c.recvConsumed})
		c.recvUsed -= c.recvConsumed
		c.recvConsumed = 0
	}
}

// resetLocked aborts s with RST_STREAM(code) unless it already ended.
func (c *Conn) resetLocked(s *Stream, code http2.ErrCode) {
	if s.finished {
		return
	}
	c.queueLocked(ctlFrame{typ: http2.FrameRSTStream, streamID: s.id, val: uint32(code)})
	if !s.remoteDone {
		c.noteResetLocked(s.id)
	}
	s.localReset = true
	err := &StreamError{Code: code}
	if s.rerr == nil || s.rerr == errEOF {
		s.rerr = err
	}
	if s.werr == nil {
		s.werr = err
	}
	c.connAckLocked(uint32(s.rbuf.n))
	s.rbuf.reset()
	s.dropHeldLocked()
	s.finishLocked()
}

// SetSink declares that everything Read returns is written to sock, by a
// goroutine that calls Read again only once that write is done. While such
// a Read waits with nothing buffered, the connection's reader then tries one
// non-blocking write of arriving DATA to sock itself and counts it as
// consumed (wrote is called with the bytes written, under the connection's
// lock: keep it cheap). This saves a goroutine wakeup per burst of data — the
// main cost of a small request/response through a tunnel. Whatever the
// socket does not take at once is buffered for Read as usual, so order is
// kept and the reader never waits for a slow sock. Call before Read.
func (s *Stream) SetSink(sock syscall.RawConn, wrote func(n int)) {
	s.c.mu.Lock()
	s.sink, s.sinkWrote = sock, wrote
	s.c.mu.Unlock()
}

// writeSinkLocked writes p to the sink with one non-blocking attempt and
// returns how much it took (0 on EAGAIN or any error: the Read's caller
// then gets the data and meets the error itself).
func (s *Stream) writeSinkLocked(p []byte) int {
	// The callback is made once per stream and its arguments passed in
	// fields: a closure made per write would allocate on every DATA frame.
	if s.sinkTry == nil {
		s.sinkTry = s.trySinkLocked
	}
	s.sinkData, s.sinkN = p, 0
	_ = s.sink.Write(s.sinkTry)
	k := s.sinkN
	s.sinkData = nil
	if k > 0 && s.sinkWrote != nil {
		s.sinkWrote(k)
	}
	return k
}

// heldSize bounds the DATA held for one sink write.
const heldSize = 128 << 10

var heldPool = sync.Pool{New: func() any { b := make([]byte, 0, heldSize); return &b }}

// holdLocked appends a full-size frame's data to what is held for the sink
// and has flushWakes write it. The caller has made room.
func (s *Stream) holdLocked(data []byte) {
	if s.held == nil {
		s.held = heldPool.Get().(*[]byte)
	}
	*s.held = append(*s.held, data...)
	s.c.queueWakeLocked(s)
}

// flushHeldLocked writes the held data to the sink with one non-blocking
// attempt; what the sink does not take goes to the receive buffer, for the
// Read, which is woken.
func (s *Stream) flushHeldLocked() {
	if s.held == nil {
		return
	}
	b := *s.held
	k := 0
	if s.sink != nil && s.rdst != nil && s.rn == 0 && s.rbuf.n == 0 {
		k = s.writeSinkLocked(b)
	}
	if k > 0 {
		s.consumedLocked(uint32(k))
	}
	if k < len(b) {
		s.rbuf.write(b[k:])
		s.wakeLocked()
	}
	s.releaseHeldLocked()
}

// dropHeldLocked discards held data of a stream reset or closed, crediting
// it to the connection's window.
func (s *Stream) dropHeldLocked() {
	if s.held != nil {
		s.c.connAckLocked(uint32(len(*s.held)))
		s.releaseHeldLocked()
	}
}

func (s *Stream) releaseHeldLocked() {
	*s.held = (*s.held)[:0]
	heldPool.Put(s.held)
	s.held = nil
}

func (s *Stream) trySinkLocked(fd uintptr) bool {
	for {
		n, err := syscall.Write(int(fd), s.sinkData)
		if err == syscall.EINTR {
			continue
		}
		if n > 0 {
			s.sinkN = n
		}
		return true // never wait for writability: the reader must not block
	}
}

// Read reads what the peer sent; io.EOF after its END_STREAM, a
// *StreamError after a reset.
func (s *Stream) Read(p []byte) (int, error) {
	c := s.c
	c.mu.Lock()
	if s.rbuf.n == 0 && s.rerr == nil && len(p) > 0 {
		s.rdst, s.rn = p, 0
		s.awaitDataLocked()
		n := s.rn
		s.rdst, s.rn = nil, 0
		if n > 0 {
			s.consumedLocked(uint32(n))
			c.mu.Unlock()
			if c.ctlPending.Load() {
				c.kick()
			}
			return n, nil
		}
	}
	if s.rerr != nil && s.rerr != errEOF {
		err := s.rerr
		c.mu.Unlock()
		return 0, err
	}
	if s.rbuf.n == 0 {
		c.mu.Unlock()
		return 0, io.EOF
	}
	n := s.rbuf.read(p)
	s.consumedLocked(uint32(n))
	c.mu.Unlock()
	if c.ctlPending.Load() {
		c.kick()
	}
	return n, nil
}

// Write sends p as DATA frames from the caller's goroutine, waiting for
// flow-control window as needed.
func (s *Stream) Write(p []byte) (int, error) {
	c := s.c
	written := 0
	for len(p) > 0 {
		c.mu.Lock()
		if err := s.waitWindowLocked(); err != nil {
			c.mu.Unlock()
			return written, err
		}
		n := min(len(p), int(s.sendWindow), int(c.sendWindow))
		s.sendWindow -= int32(n)
		c.sendWindow -= int32(n)
		frame := c.frameSizeLocked()
		c.mu.Unlock()

		if err := s.lockWrite(); err != nil {
			return written, err
		}
		for off := 0; off < n; off += frame {
			c.writeDataLocked(s.id, p[off:min(off+frame, n)], false)
		}
		if err := c.unlockWrite(); err != nil {
			return written, err
		}
		p = p[n:]
		written += n
	}
	return written, nil
}

// The layout WriteFramed takes: each DATA frame's payload preceded by room
// for its header, so that a socket read can land in the buffer the frames
// are written from (readv), with no copy into the connection's buffer.
const (
	FrameHeaderLen = 9
	// FramedPayload makes header plus payload one full TLS record (16 KiB
	// of plaintext), so that records and frames coincide.
	FramedPayload = 16<<10 - FrameHeaderLen
	FramedStride  = FrameHeaderLen + FramedPayload
)

// WriteFramed sends n bytes of payload laid out in buf as consecutive
// segments of FrameHeaderLen bytes of room and FramedPayload bytes of
// payload, the last segment possibly shorter. It writes each segment's
// frame header into its room and the frames to the connection in one
// Write, or, when the flow-control window does not cover them all, in one
// Write per run of whole segments the window covers; only a segment larger
// than the whole window goes through Write (copied, split as the window
// allows). Only the header room of buf is modified.
func (s *Stream) WriteFramed(buf []byte, n int) (int, error) {
	c := s.c
	written, seg := 0, 0
	for written < n {
		c.mu.Lock()
		if err := s.waitWindowLocked(); err != nil {
			c.mu.Unlock()
			return written, err
		}
		avail := int(min(s.sendWindow, c.sendWindow))
		k, segs := 0, 0
		for left := n - written; left > 0; segs++ {
			m := min(left, FramedPayload)
			if k+m > avail {
				break
			}
			k += m
			left -= m
		}
		if segs == 0 {
			c.mu.Unlock()
			start := seg*FramedStride + FrameHeaderLen
			m, err := s.Write(buf[start : start+min(n-written, FramedPayload)])
			written += m
			if err != nil {
				return written, err
			}
			seg++
			continue
		}
		s.sendWindow -= int32(k)
		c.sendWindow -= int32(k)
		c.mu.Unlock()

		start := seg * FramedStride
		end := start
		for left := k; left > 0; {
			m := min(left, FramedPayload)
			putDataHeader(buf[end:end+FrameHeaderLen], s.id, m, false)
			end += FrameHeaderLen + m
			left -= m
		}
		if err := s.lockWrite(); err != nil {
			return written, err
		}
		c.direct = buf[start:end] // wbuf is empty: every holder of wmu flushes it
		if err := c.unlockWrite(); err != nil {
			return written, err
		}
		written += k
		seg += segs
	}
	return written, nil
}

// lockWrite takes the connection's write lock for s, and gives it back at
// once with s's write error if s can no longer send.
func (s *Stream) lockWrite() error {
	c := s.c
	c.wmu.Lock()
	c.mu.Lock()
	err := s.writeErrLocked()
	c.mu.Unlock()
	if err != nil {
		c.wmu.Unlock()
		return err
	}
	return nil
}

// waitWindowLocked waits, under c.mu, until both flow-control windows are
// open or the stream can no longer send, and returns why it cannot.
func (s *Stream) waitWindowLocked() error {
	c := s.c
	if s.werr == nil && !s.localDone && (s.sendWindow <= 0 || c.sendWindow <= 0) {
		s.armStallLocked()
		c.waitForPeerLocked() // its WINDOW_UPDATE must be read
		for s.werr == nil && !s.localDone && (s.sendWindow <= 0 || c.sendWindow <= 0) {
			s.waitingSend = true
			s.cond.Wait()
		}
		c.waiting--
		s.waitingSend = false
		s.stopStallLocked()
	}
	return s.writeErrLocked()
}

// armStallLocked starts the stall timer for a Write about to wait for
// window; the timer resets the stream unless the wait has ended by then.
func (s *Stream) armStallLocked() {
	d := s.c.cfg.StallTimeout
	if d <= 0 {
		return
	}
	s.stallSince = time.Now()
	if s.stall == nil {
		s.stall = time.AfterFunc(d, s.onStall)
		return
	}
	s.stall.Reset(d)
}

func (s *Stream) stopStallLocked() {
	if s.stall != nil {
		s.stall.Stop()
	}
	s.stallSince = time.Time{}
}

func (s *Stream) onStall() {
	c := s.c
	c.mu.Lock()
	// A timer that fired as the wait ended, or for an earlier wait, is
	// stale: only a wait as old as the timeout counts.
	stalled := s.waitingSend && !s.stallSince.IsZero() && time.Since(s.stallSince) >= c.cfg.StallTimeout
	if stalled {
		c.resetLocked(s, http2.ErrCodeCancel)
	}
	c.mu.Unlock()
	if stalled {
		c.cfg.CountError("stream_stalled")
		c.kick()
	}
}

func (s *Stream) writeErrLocked() error {
	switch {
	case s.werr != nil:
		return s.werr
	case s.localDone:
		return errors.New("h2 stream: write after CloseWrite")
	}
	return nil
}

// writeDataLocked appends one DATA frame to wbuf, under wmu. It is written
// here rather than with Framer.WriteData, which would copy the payload once
// more into its own buffer.
func (c *Conn) writeDataLocked(id uint32, data []byte, end bool) {
	var h [FrameHeaderLen]byte
	putDataHeader(h[:], id, len(data), end)
	_, _ = c.wbuf.Write(h[:])
	_, _ = c.wbuf.Write(data)
}

// putDataHeader writes a DATA frame header into h.
func putDataHeader(h []byte, id uint32, n int, end bool) {
	h[0], h[1], h[2] = byte(n>>16), byte(n>>8), byte(n)
	h[3] = byte(http2.FrameData)
	h[4] = 0
	if end {
		h[4] = byte(http2.FlagDataEndStream)
	}
	binary.BigEndian.PutUint32(h[5:], id)
}

// CloseWrite sends END_STREAM: the peer reads EOF, the other direction goes on.
func (s *Stream) CloseWrite() error {
	c := s.c
	c.wmu.Lock()
	c.mu.Lock()
	if s.localDone {
		c.mu.Unlock()
		c.wmu.Unlock()
		return nil
	}
	if s.werr != nil {
		err := s.werr
		c.mu.Unlock()
		c.wmu.Unlock()
		return err
	}
	s.localDone = true
	c.writeDataLocked(s.id, nil, true)
	s.finishIfDoneLocked()
	c.mu.Unlock()
	return c.unlockWrite()
}

// WriteHeader sends the response status (server side); endStream also ends
// the stream's sending side, as a refusal does.
func (s *Stream) WriteHeader(status int, endStream bool) error {
	c := s.c
	c.wmu.Lock()
	c.mu.Lock()
	if err := s.writeErrLocked(); err != nil {
		c.mu.Unlock()
		c.wmu.Unlock()
		return err
	}
	if endStream {
		s.localDone = true
		s.finishIfDoneLocked()
	}
	s.respSent = true
	c.applyTableSizeLocked()
	c.mu.Unlock()
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
	c.writeHeaderBlock(s.id, endStream)
	return c.unlockWrite()
}

func statusText(code int) string {
	return string([]byte{byte('0' + code/100%10), byte('0' + code/10%10), byte('0' + code%10)})
}

// Reset aborts the stream with RST_STREAM(code).
func (s *Stream) Reset(code http2.ErrCode) {
	c := s.c
	c.mu.Lock()
	c.resetLocked(s, code)
	c.mu.Unlock()
	c.kick()
}

// Close releases the stream. One that has not ended both ways is reset:
// CANCEL when we had not finished sending, NO_ERROR when only the peer had
// not (a refused request whose body we no longer want).
func (s *Stream) Close() {
	c := s.c
	c.mu.Lock()
	if s.closed {
		c.mu.Unlock()
		return
	}
	s.closed = true
	code := http2.ErrCodeCancel
	if s.localDone {
		code = http2.ErrCodeNo
	}
	c.resetLocked(s, code)
	c.connAckLocked(uint32(s.rbuf.n))
	s.rbuf.reset()
	s.dropHeldLocked()
	c.slots--
	c.maybeIdleLocked()
	c.mu.Unlock()
	c.kick()
}

// chunkQueue is a stream's receive buffer: pooled 16 KiB chunks, none held
// while the stream is idle.
type chunkQueue struct {
	chunks []*[]byte
	r      int // read offset in chunks[0]
	n      int // bytes buffered
}

const chunkSize = 16 << 10

var chunkPool = sync.Pool{New: func() any { b := make([]byte, 0, chunkSize); return &b }}

func (q *chunkQueue) write(p []byte) {
	q.n += len(p)
	for len(p) > 0 {
		if len(q.chunks) == 0 || len(*q.chunks[len(q.chunks)-1]) == chunkSize {
			q.chunks = append(q.chunks, chunkPool.Get().(*[]byte))
		}
		last := q.chunks[len(q.chunks)-1]
		k := copy((*last)[len(*last):chunkSize], p)
		*last = (*last)[:len(*last)+k]
		p = p[k:]
	}
}

func (q *chunkQueue) read(p []byte) int {
	n := 0
	for len(p) > 0 && len(q.chunks) > 0 {
		c := q.chunks[0]
		k := copy(p, (*c)[q.r:])
		q.r += k
		n += k
		p = p[k:]
		if q.r == len(*c) {
			q.drop()
		}
	}
	q.n -= n
	return n
}

// drop releases the first chunk.
func (q *chunkQueue) drop() {
	c := q.chunks[0]
	*c = (*c)[:0]
	chunkPool.Put(c)
	copy(q.chunks, q.chunks[1:])
	q.chunks[len(q.chunks)-1] = nil
	q.chunks = q.chunks[:len(q.chunks)-1]
	q.r = 0
}

func (q *chunkQueue) reset() {
	for len(q.chunks) > 0 {
		q.drop()
	}
	q.n = 0
}
