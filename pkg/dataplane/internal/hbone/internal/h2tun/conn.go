package h2tun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Config is what both ends of a connection need; zero fields take defaults.
type Config struct {
	// StreamWindow and ConnWindow are the receive windows advertised.
	StreamWindow, ConnWindow uint32
	// MaxReadFrameSize is the largest frame the peer may send us.
	MaxReadFrameSize uint32
	// MaxConcurrentStreams: the server advertises and enforces it; the
	// client uses it as its own cap besides the server's.
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds a decoded header block (CONTINUATION flood).
	MaxHeaderListSize uint32
	// IdleTimeout closes the connection once it has had no stream this long.
	IdleTimeout time.Duration
	// StallTimeout, when set, bounds how long a write may make no progress:
	// a socket write that has not completed in this time (at least half
	// of it, see flushLocked) closes the connection (the peer stopped
	// reading it), and a stream that waits this long for flow-control
	// window is reset with CANCEL (the peer stopped reading that stream).
	StallTimeout time.Duration
	// CountError is called with a short name for each protocol error or
	// flood the connection refused.
	CountError func(kind string)
	// Admit, when set, is asked about each request on the read loop before
	// a handler runs. A status other than 0 answers the request with that
	// status and END_STREAM and resets its request side if still open
	// (NO_ERROR, RFC 9113 8.1); no handler runs. Deciding on the read loop
	// puts the answer ahead of whatever the peer sends next on the stream,
	// so those frames always meet a closed stream (with a handler racing
	// the reader, that depended on scheduling), and a refused request costs
	// neither a goroutine nor a stream slot. Admit runs with the connection
	// locked: it must not block or use the connection.
	Admit func(*Request) int
	// OnClose is called once when the connection is closed.
	OnClose func()
	// Batch, when set, is told when a write of several frames starts and
	// ends, so that the TLS records of one flush can leave in one syscall
	// (a TLS connection writes each record to its socket separately).
	Batch Batcher
	// NoLead keeps every Read of a client connection waiting for the
	// reader goroutine to hand it its data, as on a server connection,
	// instead of reading the connection itself when nobody else does
	// (lead.go): the hand-off that the benchmarks' row without inline
	// delivery keeps.
	NoLead bool

	leadGrace time.Duration // leadGrace, unless a test sets it
}

// Batcher is the socket under the TLS connection, able to hold its writes
// between StartBatch and EndBatch, and to call a function whenever a read
// is about to wait for the network (the reader then wakes the streams it
// gave data to).
type Batcher interface {
	StartBatch()
	EndBatch() error
	OnReadBlock(func())
}

const (
	initialWindow = 65535
	// maxFramePayload caps the DATA frames we send: bigger frames save few
	// header bytes and make the peer hold a bigger read buffer per connection.
	maxFramePayload = 16 << 10
	// minFrameSize is the smallest SETTINGS_MAX_FRAME_SIZE RFC 9113 allows:
	// frames of this size are always acceptable to the peer.
	minFrameSize = 16 << 10
	// maxFrameSizeLimit and maxWindow are RFC 9113's upper bounds for
	// SETTINGS_MAX_FRAME_SIZE and a flow-control window.
	maxFrameSizeLimit = 1<<24 - 1
	maxWindow         = 1<<31 - 1
	// maxQueuedControl bounds control frames (SETTINGS and PING acks,
	// RST_STREAM, WINDOW_UPDATE) waiting for the socket: a peer that floods
	// PINGs or SETTINGS but does not read the acks hits this.
	maxQueuedControl = 1000
	// A rapid-reset attacker opens and cancels streams as fast as it can;
	// a tunnel client cancels a few. Past this many peer resets in
	// resetPeriod the connection is told to calm down and closed.
	maxResetsPerPeriod = 500
	resetPeriod        = time.Second
	// Empty DATA frames without END_STREAM carry nothing; a flood of them
	// costs us a wakeup each.
	maxEmptyData = 1000
)

func (c *Config) setDefaults() {
	if c.StreamWindow == 0 {
		c.StreamWindow = 4 << 20
	}
	if c.ConnWindow == 0 {
		c.ConnWindow = 16 << 20
	}
	if c.MaxReadFrameSize == 0 {
		c.MaxReadFrameSize = 16 << 10
	}
	// What we announce must itself be valid (RFC 9113 6.5.2, 6.9.2): a
	// peer would refuse the connection otherwise.
	c.MaxReadFrameSize = min(max(c.MaxReadFrameSize, minFrameSize), maxFrameSizeLimit)
	c.StreamWindow = min(c.StreamWindow, maxWindow)
	c.ConnWindow = min(max(c.ConnWindow, initialWindow), maxWindow)
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = 100
	}
	if c.MaxHeaderListSize == 0 {
		c.MaxHeaderListSize = 64 << 10
	}
	if c.CountError == nil {
		c.CountError = func(string) {}
	}
	if c.leadGrace == 0 {
		c.leadGrace = leadGrace
	}
}

// StreamError is a stream reset by the peer (or by us, seen by our side).
type StreamError struct{ Code http2.ErrCode }

func (e *StreamError) Error() string { return "h2 stream reset: " + e.Code.String() }

// ErrRefused is a stream the server refused before processing it
// (REFUSED_STREAM, or beyond a GOAWAY): it is safe to retry elsewhere.
var ErrRefused = errors.New("h2 stream refused before processing")

var errClosed = errors.New("h2 connection closed")

// ctlFrame is a queued control frame.
type ctlFrame struct {
	typ      http2.FrameType
	streamID uint32
	val      uint32 // WINDOW_UPDATE increment, RST_STREAM/GOAWAY code, HEADERS :status
	data     [8]byte
}

// Conn is one HTTP/2 connection; use NewClient or Serve.
type Conn struct {
	nc     net.Conn
	cfg    Config
	server bool
	fr     *http2.Framer

	// wmu serialises writes to nc; wbuf holds frames until flushed (and
	// no memory while idle), henc/hbuf encode headers in wire order.
	wmu  sync.Mutex
	wbuf lazyBuf
	// direct is written after wbuf by the next flush: frames that
	// WriteFramed laid out in the caller's buffer.
	direct []byte
	henc   *hpack.Encoder
	hbuf   bytes.Buffer

	mu            sync.Mutex
	streams       map[uint32]*Stream
	slots         int    // streams not yet Closed by their owner
	reserved      int    // client: slots promised to callers about to open
	nextID        uint32 // client
	lastPeerID    uint32 // server
	peerMaxStr    uint32
	peerWindow    int32 // peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerMaxFrame  uint32
	sendWindow    int32  // connection-level, towards the peer
	recvUsed      uint32 // received and not yet announced back
	recvConsumed  uint32 // consumed since the last connection WINDOW_UPDATE
	ctl           []ctlFrame
	ctlSpawned    bool
	goAway        bool // no new streams
	peerGoAwayID  uint32
	closed        bool
	err           error
	idle          *time.Timer
	resets        int
	resetsSince   time.Time
	emptyData     int
	ctlPending    atomic.Bool
	tableSize     uint32 // peer's SETTINGS_HEADER_TABLE_SIZE, to apply
	deferWakes    bool
	wakes         []*Stream // Reads to wake before the reader blocks
	deferred      int       // bytes received since the last flushWakes
	tableSizeSet  bool
	ctlOverflow   atomic.Bool
	closeOnce     sync.Once
	done          chan struct{} // closed by close
	handler       func(*Stream, *Request)
	handlersGroup sync.WaitGroup
	sawSettings   bool // the reader has had the peer's first SETTINGS
	resetIDs      [recentResets]uint32
	resetNext     int
	terminating   bool                      // terminate is sending GOAWAY and will close
	ownDeadline   atomic.Bool               // a closing write has set its own deadline
	deadlineSet   time.Time                 // when flushLocked last set the write deadline, under wmu
	pings         map[[8]byte]chan struct{} // our PINGs awaiting their ack, by payload
	pingSeq       uint64

	// Who reads the connection (lead.go). fr reads through frd when leads.
	leads       bool        // Reads may lead (client, read deadlines work, not NoLead)
	frd         frameReader //
	leader      *Stream     // the stream whose Read has the reading
	bgLeads     bool        // the reader goroutine has it (it may not have woken yet)
	inRead      bool        // the leader is in ReadFrame, where an interrupt reaches it
	intr        atomic.Bool // a read deadline in the past interrupts the leader (set under mu)
	followers   []*Stream   // Reads waiting to lead while another reads
	waiting     int         // goroutines waiting for the peer that do not read
	yieldBG     bool        // the reader goroutine woke a Read that may lead
	readStopped bool        // the connection failed: nobody reads any more
	bgCond      sync.Cond   // on mu: the reader goroutine waits for the reading
	grace       *time.Timer // leadGrace after the reading was left to nobody
	graceArmed  bool        // grace is running
	released    uint64      // times the reading was left to nobody
	graceFrom   uint64      // released when grace started
	ledFrames   int         // frames read by leaders (for tests)
}

func newConn(nc net.Conn, cfg Config, server bool) *Conn {
	cfg.setDefaults()
	c := &Conn{
		nc: nc, cfg: cfg, server: server,
		streams:      map[uint32]*Stream{},
		nextID:       1,
		peerMaxStr:   cfg.MaxConcurrentStreams,
		peerWindow:   initialWindow,
		peerMaxFrame: 16 << 10,
		sendWindow:   initialWindow,
		done:         make(chan struct{}),
		bgLeads:      true,
	}
	c.bgCond.L = &c.mu
	var r io.Reader = nc
	// A leader's read must be interruptible: only read deadlines do that.
	if !server && !cfg.NoLead && nc.SetReadDeadline(time.Time{}) == nil {
		c.leads = true
		c.frd.c = c
		r = &c.frd
	}
	c.fr = http2.NewFramer(&c.wbuf, r)
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(cfg.MaxReadFrameSize)
	c.fr.MaxHeaderListSize = cfg.MaxHeaderListSize
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	if cfg.Batch != nil {
		c.deferWakes = true
		cfg.Batch.OnReadBlock(c.flushWakes)
	}
	return c
}

func (c *Conn) settings() []http2.Setting {
	s := []http2.Setting{
		{ID: http2.SettingInitialWindowSize, Val: c.cfg.StreamWindow},
		{ID: http2.SettingMaxFrameSize, Val: c.cfg.MaxReadFrameSize},
		{ID: http2.SettingMaxHeaderListSize, Val: c.cfg.MaxHeaderListSize},
	}
	if c.server {
		s = append(s, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.cfg.MaxConcurrentStreams})
	} else {
		s = append(s, http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	}
	return s
}

// writeHello sends our SETTINGS and the connection window, under wmu.
func (c *Conn) writeHello() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.server {
		_, _ = c.wbuf.Write([]byte(http2.ClientPreface))
	}
	_ = c.fr.WriteSettings(c.settings()...)
	if c.cfg.ConnWindow > initialWindow {
		_ = c.fr.WriteWindowUpdate(0, c.cfg.ConnWindow-initialWindow)
	}
	return c.flushLocked()
}

// flushLocked writes wbuf to the connection, under wmu.
func (c *Conn) flushLocked() error {
	if c.wbuf.b == nil && c.direct == nil {
		return nil
	}
	if c.cfg.StallTimeout > 0 && !c.ownDeadline.Load() {
		// Moving the deadline costs a timer update; doing it only once half
		// the timeout has passed still fails a write that makes no
		// progress, after between half and all of the timeout.
		if now := time.Now(); now.After(c.deadlineSet.Add(c.cfg.StallTimeout / 2)) {
			c.deadlineSet = now
			_ = c.nc.SetWriteDeadline(now.Add(c.cfg.StallTimeout))
		}
	}
	if c.cfg.Batch == nil {
		return c.flushBothLocked()
	}
	c.cfg.Batch.StartBatch()
	err := c.flushBothLocked()
	if berr := c.cfg.Batch.EndBatch(); err == nil {
		err = berr
	}
	return err
}

// flushBothLocked writes direct, then wbuf, under wmu. direct goes first:
// WriteFramed sets it with wbuf empty, and what unlockWrite then moves into
// wbuf was queued after it (a RST_STREAM of the same stream must follow
// its DATA, as it does when Write puts DATA in wbuf).
func (c *Conn) flushBothLocked() error {
	var err error
	if d := c.direct; d != nil {
		c.direct = nil
		_, err = c.nc.Write(d)
	}
	if werr := c.wbuf.flush(c.nc); err == nil {
		err = werr
	}
	return err
}

// NewClient starts a client connection on an established (TLS, ALPN h2)
// connection: it sends the preface and SETTINGS and starts the reader.
func NewClient(nc net.Conn, cfg Config) (*Conn, error) {
	c := newConn(nc, cfg, false)
	if err := c.writeHello(); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("h2 preface: %w", err)
	}
	c.mu.Lock()
	c.armIdleLocked()
	c.mu.Unlock()
	go c.readLoop()
	return c, nil
}

// Request is a CONNECT (or other) request the server received.
type Request struct {
	Method, Authority string
	Fields            []hpack.HeaderField // regular fields, in order
	// HeaderBytes is the RFC 9113 header list size (name+value+32 per field,
	// pseudo-fields included); Truncated says the list exceeded the limit.
	HeaderBytes int
	Truncated   bool
}

// Serve runs the server side of a connection until it ends; handler runs in
// its own goroutine per stream and must Close the stream. deadline bounds
// reading the client preface and first SETTINGS.
func Serve(nc net.Conn, cfg Config, deadline time.Time, handler func(*Stream, *Request)) error {
	c := newConn(nc, cfg, true)
	c.handler = handler
	defer c.handlersGroup.Wait()
	_ = nc.SetReadDeadline(deadline)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(nc, preface); err != nil || string(preface) != http2.ClientPreface {
		c.cfg.CountError("bad_preface")
		c.close(fmt.Errorf("h2 preface: %w", errors.Join(err, errors.New("bad client preface"))))
		return c.err
	}
	if err := c.writeHello(); err != nil {
		c.close(err)
		return err
	}
	f, err := c.fr.ReadFrame()
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		// A malformed SETTINGS (an INITIAL_WINDOW_SIZE beyond 2^31-1, a
		// length that is not a multiple of 6): the framer names the code.
		c.connError(err)
		<-c.done
		return c.err
	}
	if sf, ok := f.(*http2.SettingsFrame); err != nil || !ok || sf.IsAck() {
		c.cfg.CountError("settings_expected")
		c.terminate(http2.ErrCodeProtocol, errors.New("h2: first frame is not SETTINGS"))
		<-c.done
		return c.err
	}
	_ = nc.SetReadDeadline(time.Time{})
	c.sawSettings = true
	c.mu.Lock()
	c.armIdleLocked()
	c.mu.Unlock()
	if err := c.onSettings(f.(*http2.SettingsFrame)); err != nil {
		c.connError(err)
	} else {
		c.readLoop()
	}
	<-c.done
	return c.err
}

// Reserve takes a stream slot for a coming Connect; false when the
// connection is full, draining or closed.
func (c *Conn) Reserve() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.goAway || c.slots+c.reserved >= int(min(c.peerMaxStr, c.cfg.MaxConcurrentStreams)) || c.nextID >= 1<<31-2 {
		return false
	}
	c.reserved++
	c.stopIdleLocked()
	return true
}

// Unreserve gives back a slot that Reserve took and Connect did not use.
func (c *Conn) Unreserve() {
	c.mu.Lock()
	c.reserved--
	c.maybeIdleLocked()
	c.mu.Unlock()
}

// Usable reports whether new streams may still be opened.
func (c *Conn) Usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && !c.goAway
}

// Ping sends a PING and waits for its ack until ctx ends: proof that the
// peer still reads this connection. A CONNECT that got no answer may mean a
// slow upstream or a peer that is gone without a FIN (its node stopped);
// only a ping tells them apart, and only the second should cost the pool
// its connection.
func (c *Conn) Ping(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		err := c.errLocked()
		c.mu.Unlock()
		return err
	}
	c.pingSeq++
	var data [8]byte
	for i := range data {
		data[i] = byte(c.pingSeq >> (8 * i))
	}
	acked := make(chan struct{})
	if c.pings == nil {
		c.pings = map[[8]byte]chan struct{}{}
	}
	c.pings[data] = acked
	ok := c.queueLocked(ctlFrame{typ: http2.FramePing, val: 1, data: data})
	c.waitForPeerLocked()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pings, data)
		c.waiting--
		c.mu.Unlock()
	}()
	if !ok {
		return errors.New("h2 ping: control frame queue full")
	}
	c.kick()
	select {
	case <-acked:
		return nil
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.errLocked()
	case <-ctx.Done():
		return fmt.Errorf("h2 ping: %w", context.Cause(ctx))
	}
}

// Close closes the connection; its streams fail.
func (c *Conn) Close() error {
	c.close(errClosed)
	return nil
}

// Connect opens a stream with a reserved slot, sends the CONNECT headers and
// waits for the response status until ctx ends.
func (c *Conn) Connect(ctx context.Context, authority string, fields []hpack.HeaderField) (*Stream, int, error) {
	c.wmu.Lock()
	c.mu.Lock()
	c.reserved--
	if c.closed || c.goAway {
		err := c.errLocked()
		if c.goAway && !c.closed {
			err = ErrRefused
		}
		c.maybeIdleLocked()
		c.mu.Unlock()
		c.wmu.Unlock()
		return nil, 0, err
	}
	s := c.newStreamLocked(c.nextID)
	s.resp = make(chan struct{})
	c.nextID += 2
	c.slots++
	c.applyTableSizeLocked()
	c.mu.Unlock()
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":method", Value: "CONNECT"})
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":authority", Value: authority})
	for _, f := range fields {
		_ = c.henc.WriteField(f)
	}
	c.writeHeaderBlock(s.id, false)
	if err := c.unlockWrite(); err != nil {
		s.Close()
		return nil, 0, err
	}
	c.mu.Lock()
	s.awaitResponseLocked(ctx)
	c.mu.Unlock()
	select {
	case <-s.resp:
	case <-ctx.Done():
		c.mu.Lock()
		if s.respWait {
			s.respWait = false
			c.waiting--
		}
		c.mu.Unlock()
		s.Close()
		return nil, 0, context.Cause(ctx)
	}
	c.mu.Lock()
	status, err := s.status, s.rerr
	c.mu.Unlock()
	if status == 0 {
		s.Close()
		if err == nil {
			err = errClosed
		}
		return nil, 0, err
	}
	return s, status, nil
}

// applyTableSizeLocked applies the peer's header table size to the
// encoder, under wmu and mu.
func (c *Conn) applyTableSizeLocked() {
	if c.tableSizeSet {
		c.henc.SetMaxDynamicTableSizeLimit(c.tableSize)
		c.tableSizeSet = false
	}
}

// writeHeaderBlock writes hbuf as HEADERS (+CONTINUATION), under wmu.
func (c *Conn) writeHeaderBlock(id uint32, endStream bool) {
	block := c.hbuf.Bytes()
	c.mu.Lock()
	size := c.frameSizeLocked()
	c.mu.Unlock()
	first := true
	for first || len(block) > 0 {
		n := min(len(block), size)
		frag := block[:n]
		block = block[n:]
		if first {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndStream: endStream, EndHeaders: len(block) == 0})
			first = false
		} else {
			_ = c.fr.WriteContinuation(id, len(block) == 0, frag)
		}
	}
}

// frameSizeLocked is the payload size of the frames we write: the peer's
// limit, capped at maxFramePayload and never below minFrameSize, so that
// every frame written carries something and the write loops end whatever
// the peer announced.
func (c *Conn) frameSizeLocked() int {
	return int(max(min(c.peerMaxFrame, maxFramePayload), minFrameSize))
}

func (c *Conn) newStreamLocked(id uint32) *Stream {
	s := &Stream{c: c, id: id, sendWindow: c.peerWindow, recvWindow: int32(c.cfg.StreamWindow)}
	s.cond.L = &c.mu
	c.streams[id] = s
	return s
}

func (c *Conn) errLocked() error {
	if c.err != nil {
		return c.err
	}
	return errClosed
}

// unlockWrite flushes queued control frames and buffered frames, releases
// wmu, and takes it again if control frames were queued meanwhile: whoever
// holds wmu last writes what the reader queued.
func (c *Conn) unlockWrite() error {
	var err error
	for {
		c.writeQueuedLocked()
		if ferr := c.flushLocked(); ferr != nil && err == nil {
			err = ferr
		}
		c.wmu.Unlock()
		if !c.ctlPending.Load() || !c.wmu.TryLock() {
			break
		}
	}
	if err != nil {
		c.close(fmt.Errorf("h2 write: %w", err))
	}
	return err
}

// writeQueuedLocked moves queued control frames into wbuf, under wmu.
func (c *Conn) writeQueuedLocked() {
	c.mu.Lock()
	q := c.ctl
	c.ctl = nil
	c.ctlPending.Store(false)
	c.mu.Unlock()
	for _, f := range q {
		switch f.typ {
		case http2.FrameSettings:
			_ = c.fr.WriteSettingsAck()
		case http2.FramePing:
			_ = c.fr.WritePing(f.val == 0, f.data) // val 1: our own PING, not an ack
		case http2.FrameWindowUpdate:
			_ = c.fr.WriteWindowUpdate(f.streamID, f.val)
		case http2.FrameRSTStream:
			_ = c.fr.WriteRSTStream(f.streamID, http2.ErrCode(f.val))
		case http2.FrameGoAway:
			_ = c.fr.WriteGoAway(f.streamID, http2.ErrCode(f.val), nil)
		case http2.FrameHeaders: // an answer from Config.Admit
			c.mu.Lock()
			c.applyTableSizeLocked()
			c.mu.Unlock()
			c.hbuf.Reset()
			_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(int(f.val))})
			c.writeHeaderBlock(f.streamID, true)
		}
	}
}

// queueLocked queues a control frame; the caller then calls kick after
// releasing mu. It returns false on a control-frame flood.
func (c *Conn) queueLocked(f ctlFrame) bool {
	if len(c.ctl) >= maxQueuedControl {
		c.ctlOverflow.Store(true)
		return false
	}
	c.ctl = append(c.ctl, f)
	c.ctlPending.Store(true)
	return true
}

// kick gets queued control frames written without blocking the caller (the
// reader must never block on the socket: if both ends' readers did, each
// would wait for the other to read). A writer holding wmu writes them before
// it lets go; otherwise a short-lived goroutine does.
func (c *Conn) kick() {
	c.mu.Lock()
	if c.ctlSpawned || !c.ctlPending.Load() {
		c.mu.Unlock()
		return
	}
	c.ctlSpawned = true
	c.mu.Unlock()
	go func() {
		c.wmu.Lock()
		c.mu.Lock()
		c.ctlSpawned = false
		c.mu.Unlock()
		_ = c.unlockWrite()
	}()
}

// kickSync writes queued control frames from a goroutine that may block.
func (c *Conn) kickSync() {
	if !c.ctlPending.Load() {
		return
	}
	c.wmu.Lock()
	_ = c.unlockWrite()
}

// close ends the connection: every stream fails with err.
func (c *Conn) close(err error) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.err = err
		c.stopIdleLocked()
		c.stopGraceLocked()
		c.bgCond.Broadcast()
		for _, s := range c.streams {
			if s.rerr == nil {
				s.rerr = err
			}
			s.werr = err
			s.wakeLocked()
		}
		c.mu.Unlock()
		_ = c.nc.Close()
		close(c.done)
		if c.cfg.OnClose != nil {
			c.cfg.OnClose()
		}
	})
}

// terminate sends GOAWAY(code) and closes. The reader calls it, so the
// write happens in a goroutine bounded by a write deadline.
func (c *Conn) terminate(code http2.ErrCode, err error) {
	c.mu.Lock()
	c.goAway, c.terminating = true, true
	c.ctl = append(c.ctl[:0:0], ctlFrame{typ: http2.FrameGoAway, streamID: c.lastPeerID, val: uint32(code)})
	c.ctlPending.Store(true)
	c.mu.Unlock()
	c.ownDeadline.Store(true)
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	go func() {
		c.wmu.Lock()
		c.writeQueuedLocked()
		_ = c.flushLocked()
		c.wmu.Unlock()
		// Closing with unread input would make the kernel send an RST that
		// can overtake the GOAWAY; read (and drop) what the peer is still
		// sending for a moment first, as x/net's server does.
		_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(c.nc, 1<<20))
		c.close(err)
	}()
	// Streams fail now, not once the GOAWAY is out.
	c.mu.Lock()
	for _, s := range c.streams {
		if s.rerr == nil {
			s.rerr = err
		}
		s.werr = err
		s.wakeLocked()
	}
	c.mu.Unlock()
}

func (c *Conn) connError(err error) {
	var ce http2.ConnectionError
	code := http2.ErrCodeProtocol
	if errors.As(err, &ce) {
		code = http2.ErrCode(ce)
	}
	c.cfg.CountError("conn_" + code.String())
	c.terminate(code, fmt.Errorf("h2: %w", err))
}

// armIdleLocked starts the idle timer when the connection has no streams.
func (c *Conn) armIdleLocked() {
	if c.cfg.IdleTimeout <= 0 || c.closed {
		return
	}
	if c.idle == nil {
		c.idle = time.AfterFunc(c.cfg.IdleTimeout, c.onIdle)
		return
	}
	c.idle.Reset(c.cfg.IdleTimeout)
}

func (c *Conn) stopIdleLocked() {
	if c.idle != nil {
		c.idle.Stop()
	}
}

func (c *Conn) maybeIdleLocked() {
	if c.slots == 0 && c.reserved == 0 {
		// A drained client connection closes, unless terminate is still
		// writing its GOAWAY (it closes the connection itself).
		if c.goAway && !c.server && !c.terminating {
			go c.close(errClosed)
			return
		}
		c.armIdleLocked()
	}
}

func (c *Conn) onIdle() {
	c.mu.Lock()
	busy := c.slots > 0 || c.reserved > 0 || c.closed
	if !busy {
		c.goAway = true
	}
	c.mu.Unlock()
	if busy {
		return
	}
	if c.server {
		c.mu.Lock()
		c.queueLocked(ctlFrame{typ: http2.FrameGoAway, streamID: c.lastPeerID, val: uint32(http2.ErrCodeNo)})
		c.mu.Unlock()
		c.ownDeadline.Store(true)
		_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		c.kickSync()
	}
	c.close(errors.New("h2 connection idle"))
}

// lazyBuf collects frames for one write; it holds a pooled buffer only
// between the first frame and the flush, so an idle connection holds none.
type lazyBuf struct{ b *[]byte }

var wbufPool = sync.Pool{New: func() any { b := make([]byte, 0, 80<<10); return &b }}

func (l *lazyBuf) Write(p []byte) (int, error) {
	if l.b == nil {
		l.b = wbufPool.Get().(*[]byte)
	}
	*l.b = append(*l.b, p...)
	return len(p), nil
}

// flush writes the frames in one Write, so TLS fills whole records however
// the frames fall.
func (l *lazyBuf) flush(w io.Writer) error {
	if l.b == nil {
		return nil
	}
	_, err := w.Write(*l.b)
	if cap(*l.b) <= 256<<10 {
		*l.b = (*l.b)[:0]
		wbufPool.Put(l.b)
	}
	l.b = nil
	return err
}
