package hbone

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/hbone/internal/h2tun"
)

const (
	// An idle tunnel blocks in Read on every side; holding a 64 KiB buffer
	// there would cost 64 KiB per direction per idle tunnel. A small buffer
	// is held while idle and a large pooled one borrowed only while data flows.
	smallBufSize = 1 << 10
	// An h2 DATA frame has a 9-byte header and a TLS record carries at most
	// 16 KiB. Sizing writes so that header plus payload fill whole records
	// avoids a nearly empty extra record — and an extra syscall — per frame.
	bigBufSize    = 64<<10 - h2FrameHeader
	h2FrameHeader = 9
)

var bigBufs = sync.Pool{New: func() any { b := make([]byte, bigBufSize); return &b }}

// tlsReadBufSize is what batchConn reads from the socket under TLS at a
// time: a peer's flush of framedSegments records (131 KiB) and more, when
// that much is queued, in one syscall.
const tlsReadBufSize = 256 << 10

var tlsReadBufs = sync.Pool{New: func() any { b := make([]byte, tlsReadBufSize); return &b }}

// framedSegments DATA frames' worth of payload is read at a time into a
// framed buffer, laid out as h2tun.WriteFramed takes it: a socket read
// (readv) leaves room for each frame's header, so the payload is written
// to the tunnel from where it was read, with no copy. Eight (128 KiB, a
// loopback TCP buffer's worth) rather than four: on a busy tunnel each
// syscall and wakeup of the hop then carries twice the data, along the
// whole path (this read, the TLS write, the peer's read and its sink
// write), which costs less CPU per byte where syscalls are dear (VMs).
const framedSegments = 8

var framedBufs = sync.Pool{New: func() any { b := make([]byte, framedSegments*h2tun.FramedStride); return &b }}

// framedWriter is a tunnel stream that takes framed buffers.
type framedWriter interface {
	WriteFramed(buf []byte, n int) (int, error)
}

// sockReader reads a socket into a pooled buffer that is taken only once
// the socket is readable: a connection waiting for data, idle, holds none,
// and one with data queued gets it in a single large read. Its callback for
// RawConn.Read is made once, in newSockReader: a closure made per read
// would allocate its captured state on every read, several objects per
// round trip on the latency path. One goroutine reads at a time.
type sockReader struct {
	rc syscall.RawConn
	// onBlock, if set, is called each time the socket has nothing to read
	// and the read is about to wait.
	onBlock func()
	try     func(fd uintptr) bool
	buf     *[]byte
	n       int
	rerr    error
	// framed: buffers come from framedBufs and are read with readv
	// into iov, the payload segments of the framed layout.
	framed bool
	iov    [framedSegments][]byte
	// tls: buffers come from tlsReadBufs (batchConn's reads).
	tls bool
}

func (r *sockReader) pool() *sync.Pool {
	switch {
	case r.framed:
		return &framedBufs
	case r.tls:
		return &tlsReadBufs
	}
	return &bigBufs
}

func newSockReader(rc syscall.RawConn) *sockReader {
	r := &sockReader{rc: rc}
	r.try = r.tryRead
	return r
}

func (r *sockReader) tryRead(fd uintptr) bool {
	r.buf = r.pool().Get().(*[]byte)
	if r.framed {
		b := *r.buf
		for i := range r.iov {
			r.iov[i] = b[i*h2tun.FramedStride+h2tun.FrameHeaderLen : (i+1)*h2tun.FramedStride]
		}
	}
	for {
		if r.framed {
			r.n, r.rerr = unix.Readv(int(fd), r.iov[:])
		} else {
			r.n, r.rerr = syscall.Read(int(fd), *r.buf)
		}
		if r.rerr != syscall.EINTR {
			break
		}
	}
	if r.framed {
		r.iov = [framedSegments][]byte{}
	}
	if r.rerr == syscall.EAGAIN {
		r.pool().Put(r.buf)
		r.buf = nil
		if r.onBlock != nil {
			r.onBlock()
		}
		return false // wait until readable, holding nothing
	}
	return true
}

// read returns a pooled buffer holding n bytes (nil with an error); the
// caller owns it and puts it back into bigBufs.
func (r *sockReader) read() (*[]byte, int, error) {
	r.buf, r.n, r.rerr = nil, 0, nil
	err := r.rc.Read(r.try)
	buf, n := r.buf, r.n
	r.buf = nil
	switch {
	case err == nil && r.rerr != nil:
		err = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", r.rerr)}
	case err == nil && n == 0:
		err = io.EOF
	}
	if err != nil {
		if buf != nil {
			r.pool().Put(buf)
		}
		return nil, 0, err
	}
	return buf, n, nil
}

// rawConn returns c's raw socket when it has one (TCP), for a sockReader.
func rawConn(c any) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// splice copies src to dst until src ends. It returns the first read error
// (io.EOF for a clean end) and whether it was a write that failed.
func splice(dst io.Writer, src io.Reader, counter prometheus.Counter) (readErr error, writeFailed bool) {
	if rc := rawConn(src); rc != nil {
		return spliceSocket(dst, rc, counter)
	}
	small := make([]byte, smallBufSize)
	var big *[]byte
	defer func() {
		if big != nil {
			bigBufs.Put(big)
		}
	}()
	for {
		buf := small
		if big != nil {
			buf = *big
		}
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr, true
			}
			if counter != nil {
				counter.Add(float64(n))
			}
		}
		if err != nil {
			return err, false
		}
		switch {
		case big == nil && n == len(small):
			big = bigBufs.Get().(*[]byte)
		case big != nil && n < len(buf)/4:
			bigBufs.Put(big)
			big = nil
		}
	}
}

// spliceSocket is splice from a socket: no buffer at all while idle.
func spliceSocket(dst io.Writer, src syscall.RawConn, counter prometheus.Counter) (readErr error, writeFailed bool) {
	r := newSockReader(src)
	if fw, ok := dst.(framedWriter); ok {
		r.framed = true
		for {
			buf, n, err := r.read()
			if err != nil {
				return err, false
			}
			_, werr := fw.WriteFramed(*buf, n)
			framedBufs.Put(buf)
			if werr != nil {
				return werr, true
			}
			if counter != nil {
				counter.Add(float64(n))
			}
		}
	}
	for {
		buf, n, err := r.read()
		if err != nil {
			return err, false
		}
		_, werr := dst.Write((*buf)[:n])
		bigBufs.Put(buf)
		if werr != nil {
			return werr, true
		}
		if counter != nil {
			counter.Add(float64(n))
		}
	}
}

// setSink lets st's connection reader write arriving data straight to dst
// (h2tun.Stream.SetSink) when dst is a plain TCP socket: anything else —
// TLS, a wrapper — must see every write, so it keeps the splice path.
func setSink(st interface {
	SetSink(syscall.RawConn, func(int))
}, dst net.Conn, counter prometheus.Counter) {
	tc, ok := dst.(*net.TCPConn)
	if !ok {
		return
	}
	rc := rawConn(tc)
	if rc == nil {
		return
	}
	st.SetSink(rc, func(n int) { counter.Add(float64(n)) })
}

// closeWrite half-closes a connection so the peer reads EOF while the other
// direction keeps flowing; this is how a FIN crosses the tunnel.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// reset closes a TCP connection with RST instead of FIN, mirroring a stream
// reset on the other side of the tunnel.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// batchConn is the socket under an HBONE TLS connection. Between StartBatch
// and EndBatch (one h2tun flush, up to 128 KiB of frames) it collects the
// TLS records in a pooled buffer and writes them with one syscall, where
// TLS alone would make one per 16 KiB record. Reads likewise take up to
// 256 KiB per syscall (sockReader) where TLS asks for about one record at a
// time. Outside a batch and while idle it holds no buffer.
type batchConn struct {
	net.Conn
	mu       sync.Mutex // TLS serialises its writes, but EndBatch runs outside them
	batching bool
	buf      *[]byte

	r       *sockReader // nil: reads pass through
	rbuf    *[]byte
	pending []byte
	onBlock func()
}

// OnReadBlock sets what Read calls before it waits for the socket; set
// before the connection is read from concurrently.
func (b *batchConn) OnReadBlock(f func()) {
	b.onBlock = f
	if b.r != nil {
		b.r.onBlock = f
	}
}

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c}
	if _, ok := c.(*net.TCPConn); ok {
		if rc := rawConn(c); rc != nil {
			b.r = newSockReader(rc)
			b.r.tls = true
		}
	}
	return b
}

// Read is called by the TLS connection only (which serialises its reads).
func (b *batchConn) Read(p []byte) (int, error) {
	if b.r == nil {
		if b.onBlock != nil {
			b.onBlock() // no way to tell whether it would block: assume so
		}
		return b.Conn.Read(p)
	}
	if len(b.pending) == 0 {
		buf, n, err := b.r.read()
		if err != nil {
			return 0, err
		}
		b.rbuf, b.pending = buf, (*buf)[:n]
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	if len(b.pending) == 0 {
		tlsReadBufs.Put(b.rbuf)
		b.rbuf, b.pending = nil, nil
	}
	return n, nil
}

// batchBufs hold one flush's records: framedSegments full records with
// their TLS overhead fit without growing.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 132<<10); return &b }}

func (b *batchConn) StartBatch() {
	b.mu.Lock()
	b.batching = true
	b.mu.Unlock()
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.batching {
		return b.Conn.Write(p)
	}
	if b.buf == nil {
		b.buf = batchBufs.Get().(*[]byte)
	}
	*b.buf = append(*b.buf, p...)
	if len(*b.buf) >= 256<<10 {
		return len(p), b.flushLocked()
	}
	return len(p), nil
}

func (b *batchConn) EndBatch() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batching = false
	return b.flushLocked()
}

func (b *batchConn) flushLocked() error {
	if b.buf == nil {
		return nil
	}
	_, err := b.Conn.Write(*b.buf)
	*b.buf = (*b.buf)[:0]
	batchBufs.Put(b.buf)
	b.buf = nil
	return err
}
