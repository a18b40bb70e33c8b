package h2tun

import (
	"errors"
	"strconv"
	"time"

	"golang.org/x/net/http2"
)

// resetStream answers a stream-level error the framer found.
func (c *Conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	if s := c.streams[id]; s != nil {
		c.resetLocked(s, code)
	} else {
		if c.server && id%2 == 1 && id > c.lastPeerID {
			c.lastPeerID = id
		}
		c.queueLocked(ctlFrame{typ: http2.FrameRSTStream, streamID: id, val: uint32(code)})
	}
	c.mu.Unlock()
	c.kick()
}

func (c *Conn) handle(f http2.Frame) error {
	if !c.sawSettings {
		// The peer's preface is a SETTINGS frame (RFC 9113 3.4); Serve
		// checks the client's before the reader starts.
		if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
			c.cfg.CountError("settings_expected")
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.sawSettings = true
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return c.onSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			// An ack of one of our PINGs; any other is ignored, as RFC
			// 9113 lets a receiver do with an ack it did not ask for.
			c.mu.Lock()
			if ch, ok := c.pings[f.Data]; ok {
				delete(c.pings, f.Data)
				close(ch)
			}
			c.mu.Unlock()
			return nil
		}
		return c.queueAndKick(ctlFrame{typ: http2.FramePing, data: f.Data})
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.GoAwayFrame:
		c.onGoAway(f)
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	case *http2.PriorityFrame:
		// Priorities are ignored, but a stream cannot depend on itself
		// (RFC 9113 5.3.1).
		if f.StreamDep == f.StreamID {
			c.cfg.CountError("stream_PROTOCOL_ERROR_self_dependency")
			c.resetStream(f.StreamID, http2.ErrCodeProtocol)
		}
		return nil
	default: // PRIORITY and unknown frame types are ignored, as RFC 9113 says
		return nil
	}
}

func (c *Conn) queueAndKick(f ctlFrame) error {
	c.mu.Lock()
	ok := c.queueLocked(f)
	c.mu.Unlock()
	if !ok {
		c.cfg.CountError("control_flood")
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	c.kick()
	return nil
}

func (c *Conn) onSettings(f *http2.SettingsFrame) error {
	c.mu.Lock()
	err := c.applySettingsLocked(f)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.kick()
	return nil
}

// applySettingsLocked validates and applies a peer's SETTINGS and queues
// the ACK, under mu.
func (c *Conn) applySettingsLocked(f *http2.SettingsFrame) error {
	// RFC 9113 6.5.2: values out of range are connection errors, checked
	// before any of them is applied (a MAX_FRAME_SIZE of 0 would otherwise
	// make every frame we write empty and the write loops endless).
	if err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		if !c.server && s.ID == http2.SettingEnablePush && s.Val != 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil
	}); err != nil {
		return err
	}
	oldWindow := c.peerWindow
	_ = f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			c.peerWindow = int32(s.Val)
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = s.Val
		case http2.SettingMaxConcurrentStreams:
			c.peerMaxStr = s.Val
		case http2.SettingHeaderTableSize:
			// The encoder is used under wmu, which the reader must not
			// wait for; the next header block applies it (before our ACK
			// is written, since the ACK is queued behind it).
			c.tableSize, c.tableSizeSet = s.Val, true
		}
		return nil
	})
	if delta := int64(c.peerWindow) - int64(oldWindow); delta != 0 {
		// A change of INITIAL_WINDOW_SIZE moves every stream's send window;
		// one pushed beyond 2^31-1 is a connection error (6.9.2).
		for _, s := range c.streams {
			if int64(s.sendWindow)+delta > 1<<31-1 {
				return http2.ConnectionError(http2.ErrCodeFlowControl)
			}
		}
		for _, s := range c.streams {
			s.sendWindow += int32(delta)
			s.wakeLocked()
		}
	}
	if !c.queueLocked(ctlFrame{typ: http2.FrameSettings}) {
		c.cfg.CountError("control_flood")
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	return nil
}

func (c *Conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		if int64(c.sendWindow)+int64(f.Increment) > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendWindow += int32(f.Increment)
		for _, s := range c.streams {
			if s.waitingSend {
				s.wakeLocked()
			}
		}
		return nil
	}
	s := c.streams[f.StreamID]
	if s == nil {
		return c.checkKnownLocked(f.StreamID)
	}
	if int64(s.sendWindow)+int64(f.Increment) > 1<<31-1 {
		c.resetLocked(s, http2.ErrCodeFlowControl)
		return nil
	}
	s.sendWindow += int32(f.Increment)
	s.wakeLocked()
	return nil
}

// checkKnownLocked: a frame for a stream we do not have is fine when the
// stream existed (it was closed) and a protocol error when it is idle.
func (c *Conn) checkKnownLocked(id uint32) error {
	if c.server && id > c.lastPeerID && id%2 == 1 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if !c.server && (id%2 == 0 || id >= c.nextID) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil
}

func (c *Conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	s := c.streams[f.StreamID]
	if s == nil {
		// Both ends have reset the stream: nothing the peer sends on it
		// from now on was in flight before our reset.
		c.forgetResetLocked(f.StreamID)
		err := c.checkKnownLocked(f.StreamID)
		c.mu.Unlock()
		return err
	}
	if c.server && !s.respSent {
		// Rapid reset is HEADERS then RST_STREAM before any answer; a
		// client closing a tunnel it was using resets an answered stream
		// (x/net's client and ours do) and is not counted.
		if c.rapidResetLocked() {
			c.mu.Unlock()
			c.cfg.CountError("rapid_reset")
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
	}
	err := error(&StreamError{Code: f.ErrCode})
	if f.ErrCode == http2.ErrCodeRefusedStream && s.resp != nil && s.status == 0 {
		err = ErrRefused
	}
	if s.rerr == nil {
		s.rerr = err
	}
	if s.werr == nil {
		s.werr = err
	}
	s.peerReset = true
	s.finishLocked()
	c.mu.Unlock()
	return nil
}

// rapidResetLocked counts one reset stream and reports whether there have
// been too many in the current period.
func (c *Conn) rapidResetLocked() bool {
	now := time.Now()
	if now.Sub(c.resetsSince) > resetPeriod {
		c.resets, c.resetsSince = 0, now
	}
	c.resets++
	return c.resets > maxResetsPerPeriod
}

func (c *Conn) onGoAway(f *http2.GoAwayFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.goAway = true
	c.peerGoAwayID = f.LastStreamID
	if !c.server {
		for id, s := range c.streams {
			if id > f.LastStreamID {
				s.rerr, s.werr = ErrRefused, ErrRefused
				s.finishLocked()
			}
		}
	}
	c.maybeIdleLocked()
}

func (c *Conn) onData(f *http2.DataFrame) error {
	n := f.Length // counts padding too, as flow control does
	data := f.Data()
	c.mu.Lock()
	if int64(c.recvUsed)+int64(n) > int64(c.cfg.ConnWindow) {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	// The connection window is credited back when the stream's reader
	// consumes the data; whatever does not reach a reader is credited now.
	c.recvUsed += n
	s := c.streams[f.StreamID]
	if s == nil {
		// DATA on an idle stream is a connection error. On a closed one
		// it is a stream error (RFC 9113 6.1), except on a stream we
		// reset while the peer was still sending: frames it had in flight
		// are ignored (5.1).
		err := c.checkKnownLocked(f.StreamID)
		c.connAckLocked(n)
		if err == nil && !c.recentlyResetLocked(f.StreamID) {
			c.queueLocked(ctlFrame{typ: http2.FrameRSTStream, streamID: f.StreamID, val: uint32(http2.ErrCodeStreamClosed)})
		}
		c.mu.Unlock()
		c.kick()
		return err
	}
	if s.remoteDone {
		c.connAckLocked(n)
		c.resetLocked(s, http2.ErrCodeStreamClosed)
		c.mu.Unlock()
		c.kick()
		return nil
	}
	if len(data) == 0 && !f.StreamEnded() {
		c.emptyData++
		if c.emptyData > maxEmptyData {
			c.mu.Unlock()
			c.cfg.CountError("empty_data_flood")
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
	}
	if int64(n) > int64(s.recvWindow) {
		c.connAckLocked(n)
		c.resetLocked(s, http2.ErrCodeFlowControl)
		c.mu.Unlock()
		c.kick()
		return nil
	}
	s.recvWindow -= int32(n)
	if pad := n - uint32(len(data)); pad > 0 {
		s.consumedLocked(pad)
	}
	// A Read waiting with nothing handed over yet means its caller has
	// written everything earlier to the sink: writing this data there now
	// keeps the order.
	inlined := false
	if s.sink != nil && s.rdst != nil && s.rn == 0 && len(data) > 0 {
		// Full-size frames (16 KiB, or WriteFramed's one TLS record) are
		// a burst in progress: they are held and written to the sink in
		// one syscall when the burst ends (the reader is about to block,
		// a shorter frame comes, or the buffer is full), where writing
		// each would cost a syscall per 16 KiB.
		hold := c.deferWakes && len(data) >= FramedPayload && len(data) <= heldSize && !f.StreamEnded()
		if s.held != nil && (!hold || len(*s.held)+len(data) > heldSize) {
			s.flushHeldLocked()
		}
		if s.rbuf.n == 0 {
			if hold {
				s.holdLocked(data)
				data = nil
				inlined = true
			} else if k := s.writeSinkLocked(data); k > 0 {
				s.consumedLocked(uint32(k))
				data = data[k:]
				inlined = len(data) == 0
			}
		}
	} else if s.held != nil {
		s.flushHeldLocked()
	}
	if s.rdst != nil && s.rbuf.n == 0 {
		k := copy(s.rdst[s.rn:], data)
		s.rn += k
		data = data[k:]
	}
	if len(data) > 0 {
		s.rbuf.write(data)
	}
	if f.StreamEnded() {
		s.remoteDone = true
		if s.rerr == nil {
			s.rerr = errEOF
		}
		s.finishIfDoneLocked()
	}
	// A Read waiting for data is woken once the reader has nothing more
	// to parse (see Batch's OnReadBlock), so it wakes once per burst of
	// frames and gets them all, not once per 16 KiB frame; sooner when
	// its buffer is full or the stream ended.
	switch {
	case inlined && !f.StreamEnded():
		// Nothing for the Read: leave it asleep.
	case !c.deferWakes || f.StreamEnded() || s.rdst == nil || s.rn == len(s.rdst):
		s.wakeLocked()
	default:
		s.wakeDeferred = true
		c.queueWakeLocked(s)
	}
	if s.rdst != nil && !inlined && c.canLeadLocked(s) {
		// Its caller will likely Read again: the reader goroutine leaves
		// that Read the reading (lead.go).
		c.yieldBG = true
	}
	c.deferred += int(n)
	flush := c.deferred >= maxDeferredBytes
	c.mu.Unlock()
	if flush {
		c.flushWakes()
	}
	c.kick()
	return nil
}

// maxDeferredBytes bounds how long a deferred wakeup waits while other
// streams' data keeps the reader busy.
const maxDeferredBytes = 256 << 10

// queueWakeLocked puts s on the list flushWakes goes through.
func (c *Conn) queueWakeLocked(s *Stream) {
	if !s.queued {
		s.queued = true
		c.wakes = append(c.wakes, s)
	}
}

// flushWakes writes the data onData held for sinks and wakes the Reads
// whose wakeup it deferred. The reader calls it just before it would block
// on the socket, and a reader that gives up the reading (lead.go) before it
// does.
func (c *Conn) flushWakes() {
	c.mu.Lock()
	c.flushWakesLocked()
	c.mu.Unlock()
}

func (c *Conn) flushWakesLocked() {
	for i, s := range c.wakes {
		s.queued = false
		s.flushHeldLocked()
		if s.wakeDeferred {
			s.wakeDeferred = false
			s.wakeLocked()
		}
		c.wakes[i] = nil
	}
	c.wakes = c.wakes[:0]
	c.deferred = 0
}

func (c *Conn) onHeaders(f *http2.MetaHeadersFrame) error {
	if c.server {
		return c.onRequest(f)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.streams[f.StreamID]
	if s == nil {
		return c.checkKnownLocked(f.StreamID)
	}
	if s.remoteDone {
		// Half-closed (remote): only WINDOW_UPDATE, PRIORITY, RST_STREAM.
		c.resetLocked(s, http2.ErrCodeStreamClosed)
		return nil
	}
	if s.status != 0 || s.resp == nil {
		// Trailers: allowed only as the stream's end, without pseudo-fields.
		if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
			c.resetLocked(s, http2.ErrCodeProtocol)
			return nil
		}
		s.flushHeldLocked()
		s.remoteDone = true
		if s.rerr == nil {
			s.rerr = errEOF
		}
		s.finishIfDoneLocked()
		s.wakeLocked()
		return nil
	}
	st, err := strconv.Atoi(f.PseudoValue("status"))
	if err != nil || st < 100 || st > 999 {
		s.rerr = errors.New("h2: bad response :status")
		c.resetLocked(s, http2.ErrCodeProtocol)
		return nil
	}
	if st < 200 {
		return nil // 1xx informational: the real response follows
	}
	s.status = st
	if c.canLeadLocked(s) {
		// Its Reads will likely follow: the reader goroutine leaves them
		// the reading (lead.go).
		c.yieldBG = true
	}
	if f.StreamEnded() {
		s.remoteDone = true
		if s.rerr == nil {
			s.rerr = errEOF
		}
		s.finishIfDoneLocked()
	}
	s.wakeLocked()
	return nil
}

func (c *Conn) onRequest(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	c.mu.Lock()
	if s := c.streams[id]; s != nil {
		// Trailers on a request stream: only as its end, without
		// pseudo-fields, and not once the client's side has ended.
		code := http2.ErrCode(0)
		switch {
		case s.remoteDone:
			code = http2.ErrCodeStreamClosed
		case !f.StreamEnded() || len(f.PseudoFields()) > 0:
			code = http2.ErrCodeProtocol
		}
		if code != 0 {
			c.resetLocked(s, code)
			c.mu.Unlock()
			c.kick()
			return nil
		}
		s.flushHeldLocked()
		s.remoteDone = true
		if s.rerr == nil {
			s.rerr = errEOF
		}
		s.finishIfDoneLocked()
		s.wakeLocked()
		c.mu.Unlock()
		return nil
	}
	if id%2 == 0 {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if id <= c.lastPeerID {
		// A closed stream: ignore what was in flight when we reset it
		// (RFC 9113 5.1); anything else on it is STREAM_CLOSED.
		ignore := c.recentlyResetLocked(id)
		c.mu.Unlock()
		if ignore {
			return nil
		}
		return http2.ConnectionError(http2.ErrCodeStreamClosed)
	}
	c.lastPeerID = id
	if c.goAway || c.closed {
		c.mu.Unlock()
		return nil // draining: the stream is ignored, the GOAWAY said so
	}
	if why := malformedRequest(f); why != "" {
		// RFC 9113 8.1.1: a malformed request is a stream error.
		c.queueLocked(ctlFrame{typ: http2.FrameRSTStream, streamID: id, val: uint32(http2.ErrCodeProtocol)})
		c.mu.Unlock()
		c.cfg.CountError("stream_PROTOCOL_ERROR_malformed")
		c.kick()
		return nil
	}
	req := newRequest(f)
	if c.cfg.Admit != nil {
		if status := c.cfg.Admit(req); status != 0 {
			c.queueLocked(ctlFrame{typ: http2.FrameHeaders, streamID: id, val: uint32(status)})
			if !f.StreamEnded() {
				c.queueLocked(ctlFrame{typ: http2.FrameRSTStream, streamID: id, val: uint32(http2.ErrCodeNo)})
				c.noteResetLocked(id)
			}
			c.mu.Unlock()
			c.kick()
			return nil
		}
	}
	if c.slots >= int(c.cfg.MaxConcurrentStreams) {
		// A stream refused costs us a reset as one the peer cancels does:
		// a flood of either (handlers slow to let go of their slots make
		// one into the other) counts towards the same limit.
		if c.rapidResetLocked() {
			c.mu.Unlock()
			c.cfg.CountError("rapid_reset")
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
		c.queueLocked(ctlFrame{typ: http2.FrameRSTStream, streamID: id, val: uint32(http2.ErrCodeRefusedStream)})
		c.mu.Unlock()
		c.cfg.CountError("stream_REFUSED_STREAM_over_max_streams")
		c.kick()
		return nil
	}
	s := c.newStreamLocked(id)
	c.slots++
	c.stopIdleLocked()
	if f.StreamEnded() {
		s.remoteDone = true
		s.rerr = errEOF
	}
	c.mu.Unlock()
	c.handlersGroup.Add(1)
	go func() {
		defer c.handlersGroup.Done()
		c.handler(s, req)
	}()
	return nil
}

func newRequest(f *http2.MetaHeadersFrame) *Request {
	req := &Request{Method: f.PseudoValue("method"), Authority: f.PseudoValue("authority"), Truncated: f.Truncated}
	for _, hf := range f.Fields {
		req.HeaderBytes += int(hf.Size())
		if !hf.IsPseudo() {
			req.Fields = append(req.Fields, hf)
		}
	}
	return req
}
