package zds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// DefaultSocketPath is where upstream's node agent listens and ztunnel dials.
const DefaultSocketPath = "/var/run/ztunnel/ztunnel.sock"

// ErrNoProxy is returned by AddWorkload when no proxy is connected. The
// workload is still recorded and goes out in the next proxy's snapshot, but
// the caller must not treat the pod as meshed yet.
var ErrNoProxy = errors.New("no proxy connected to the zds socket")

// Workload is a pod the node agent hands to the proxy.
type Workload struct {
	UID  string
	Info WorkloadInfo
	// Netns is the pod's network namespace. The Server takes ownership and
	// closes it when the workload is deleted or replaced.
	Netns *os.File
}

// Server is the node agent's end of ZDS. It keeps the set of workloads the
// agent manages, so every proxy that (re)connects gets a full snapshot.
type Server struct {
	path    string
	timeout time.Duration
	log     *slog.Logger
	gauge   prometheus.Gauge

	// peerUIDs may connect (SO_PEERCRED): root and the agent's own user.
	peerUIDs []uint32

	mu        sync.Mutex
	workloads map[string]Workload // Netns nil: known, but netns not held
	conns     []*serverConn       // oldest first; the last is the newest
}

// Option configures a Server.
type Option func(*Server)

// WithSocketPath sets the unix socket Run listens on.
func WithSocketPath(path string) Option { return func(s *Server) { s.path = path } }

// WithTimeout sets the per-exchange deadline (default DefaultTimeout).
func WithTimeout(d time.Duration) Option { return func(s *Server) { s.timeout = d } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithRegisterer registers the ztunnel_connected gauge with r instead of the
// default registry; tests pass a fresh registry so servers do not collide.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(s *Server) { s.gauge = newGauge(r) }
}

func newGauge(r prometheus.Registerer) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ztunnel_connected",
		Help: "Number of proxies connected to the node agent's zds socket.",
	})
	if err := r.Register(g); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(prometheus.Gauge); ok {
				return existing
			}
		}
	}
	return g
}

// NewServer returns a Server; call Run or Serve to accept proxies.
func NewServer(opts ...Option) *Server {
	s := &Server{
		path:      DefaultSocketPath,
		timeout:   DefaultTimeout,
		log:       slog.Default(),
		workloads: map[string]Workload{},
		peerUIDs:  []uint32{0, uint32(os.Getuid())},
	}
	for _, o := range opts {
		o(s)
	}
	if s.gauge == nil {
		s.gauge = newGauge(prometheus.DefaultRegisterer)
	}
	return s
}

// Run listens on the socket path and serves until ctx ends. A socket left by
// a previous agent is removed first: the proxy redials, and the snapshot
// tells it everything it needs.
func (s *Server) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return fmt.Errorf("creating zds socket dir: %w", err)
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale zds socket: %w", err)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: s.path, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("listening on zds socket: %w", err)
	}
	// Connecting takes write permission on the socket: owner only.
	if err := os.Chmod(s.path, 0o600); err != nil {
		_ = ln.Close()
		return fmt.Errorf("restricting zds socket: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve accepts proxies on ln until ctx ends, then closes ln and every
// connection. A misbehaving proxy only ever loses its own connection.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accepting zds connection: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.handle(ctx, c); err != nil {
				s.log.Warn("zds connection dropped", "err", err)
			}
		}()
	}
}

// Connected reports how many proxies are connected.
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// AddWorkload records w and sends it to the newest proxy, which owns new
// pods (an older one is draining). It returns once the proxy acked.
func (s *Server) AddWorkload(ctx context.Context, w Workload) error {
	if w.Netns == nil {
		return fmt.Errorf("adding workload %s: no netns", w.UID)
	}
	s.mu.Lock()
	s.replace(w)
	if len(s.conns) == 0 {
		s.mu.Unlock()
		return fmt.Errorf("adding workload %s: %w", w.UID, ErrNoProxy)
	}
	c := s.conns[len(s.conns)-1]
	fd, err := dup(w.Netns)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("adding workload %s: %w", w.UID, err)
	}
	// Taking the connection's send lock before releasing s.mu keeps the
	// order of Add and Del for one pod the order callers made them in.
	c.sendMu.Lock()
	s.mu.Unlock()
	defer c.sendMu.Unlock()
	defer fd.Close()
	if err := c.exchange(ctx, request{kind: KindAdd, uid: w.UID, info: w.Info}, fd, s.timeout); err != nil {
		return fmt.Errorf("adding workload %s: %w", w.UID, err)
	}
	return nil
}

// KeepWorkload records a pod the agent knows but holds no netns for (e.g.
// after its own restart); snapshots then tell the proxy to keep it.
func (s *Server) KeepWorkload(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replace(Workload{UID: uid})
}

// DeleteWorkload forgets the workload and tells every proxy, old and new,
// since any of them may still be serving it.
func (s *Server) DeleteWorkload(ctx context.Context, uid string) error {
	s.mu.Lock()
	if old, ok := s.workloads[uid]; ok && old.Netns != nil {
		_ = old.Netns.Close()
	}
	delete(s.workloads, uid)
	conns := append([]*serverConn(nil), s.conns...)
	for _, c := range conns {
		c.sendMu.Lock()
	}
	s.mu.Unlock()
	var errs []error
	for _, c := range conns {
		if err := c.exchange(ctx, request{kind: KindDel, uid: uid}, nil, s.timeout); err != nil {
			errs = append(errs, err)
		}
		c.sendMu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deleting workload %s: %w", uid, err)
	}
	return nil
}

// replace stores w, closing the netns of the entry it replaces. s.mu held.
func (s *Server) replace(w Workload) {
	if old, ok := s.workloads[w.UID]; ok && old.Netns != nil && old.Netns != w.Netns {
		_ = old.Netns.Close()
	}
	s.workloads[w.UID] = w
}

// checkPeer admits only a peer running as one of s.peerUIDs: whoever
// connects receives every pod's netns fd, and the newest connection gets
// every new pod (as upstream's node agent hands pods over, so a rolling
// proxy upgrade takes them over). Mounting the hostPath takes a privileged
// pod anyway; this keeps a process of another user on the node, or in a
// pod sharing the directory, from taking pods if the socket's mode is
// widened.
func (s *Server) checkPeer(uc *net.UnixConn) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return fmt.Errorf("peer credentials: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if !slices.Contains(s.peerUIDs, cred.Uid) {
		return fmt.Errorf("refusing zds peer pid %d uid %d: only uids %v may connect", cred.Pid, cred.Uid, s.peerUIDs)
	}
	return nil
}

// handle runs one proxy connection: hello, snapshot, then it stays
// registered for AddWorkload/DeleteWorkload until the peer goes away.
func (s *Server) handle(ctx context.Context, uc *net.UnixConn) error {
	c := &serverConn{pc: packetConn{c: uc}, acks: make(chan string, 1), done: make(chan struct{})}
	defer c.close(errors.New("server shutting down"))
	if err := s.checkPeer(uc); err != nil {
		return err
	}
	msg, fds, err := c.pc.recv(time.Now().Add(s.timeout))
	if err != nil {
		return fmt.Errorf("reading hello: %w", err)
	}
	if len(fds) > 0 {
		closeAll(fds)
		return fmt.Errorf("reading hello: %w", errUnexpectedFD)
	}
	v, err := unmarshalHello(msg)
	if err != nil {
		return fmt.Errorf("reading hello: %w", err)
	}
	if v != versionV1 {
		return fmt.Errorf("reading hello: unsupported zds version %d", v)
	}
	go c.readAcks()

	s.mu.Lock()
	snap, err := s.snapshot()
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("taking snapshot: %w", err)
	}
	c.sendMu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
	s.gauge.Inc()
	defer s.unregister(c)

	err = s.sendSnapshot(ctx, c, snap)
	c.sendMu.Unlock()
	if err != nil {
		return fmt.Errorf("sending snapshot: %w", err)
	}
	s.log.Info("proxy connected", "workloads", len(snap))
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return nil
	}
}

func (s *Server) unregister(c *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, cc := range s.conns {
		if cc == c {
			s.conns = append(s.conns[:i], s.conns[i+1:]...)
			s.gauge.Dec()
			return
		}
	}
}

// snapshot copies the workload table, duplicating netns fds so a concurrent
// DeleteWorkload closing the original cannot make us send a recycled fd.
// s.mu held.
func (s *Server) snapshot() ([]Workload, error) {
	out := make([]Workload, 0, len(s.workloads))
	for _, w := range s.workloads {
		if w.Netns != nil {
			fd, err := dup(w.Netns)
			if err != nil {
				for _, o := range out {
					if o.Netns != nil {
						_ = o.Netns.Close()
					}
				}
				return nil, err
			}
			w.Netns = fd
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out, nil
}

func (s *Server) sendSnapshot(ctx context.Context, c *serverConn, snap []Workload) error {
	defer func() {
		for _, w := range snap {
			if w.Netns != nil {
				_ = w.Netns.Close()
			}
		}
	}()
	for _, w := range snap {
		req := request{kind: KindKeep, uid: w.UID}
		if w.Netns != nil {
			req = request{kind: KindAdd, uid: w.UID, info: w.Info}
		}
		if err := c.exchange(ctx, req, w.Netns, s.timeout); err != nil {
			return err
		}
	}
	return c.exchange(ctx, request{kind: KindSnapshotSent}, nil, s.timeout)
}

// serverConn is one proxy connection. One request is in flight at a time
// (sendMu); a reader goroutine receives the acks so a peer that hangs up is
// noticed at once, not at the next request.
type serverConn struct {
	pc      packetConn
	sendMu  sync.Mutex
	waiting atomic.Bool
	acks    chan string
	done    chan struct{}

	once sync.Once
	err  error
}

// exchange sends one request and waits for its ack. Any failure other than a
// refusing ack leaves the stream in an unknown state, so it drops the
// connection. Callers hold sendMu.
func (c *serverConn) exchange(ctx context.Context, req request, fd *os.File, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.done:
		return fmt.Errorf("sending %s: connection closed: %w", req.kind, c.err)
	default:
	}
	c.waiting.Store(true)
	if err := c.pc.send(marshalRequest(req), fd, time.Now().Add(timeout)); err != nil {
		c.close(err)
		return fmt.Errorf("sending %s: %w", req.kind, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case msg := <-c.acks:
		if msg != "" {
			return fmt.Errorf("proxy refused %s %s: %s", req.kind, req.uid, msg)
		}
		return nil
	case <-c.done:
		return fmt.Errorf("waiting for ack of %s: %w", req.kind, c.err)
	case <-t.C:
		err := fmt.Errorf("no ack for %s within %s", req.kind, timeout)
		c.close(err)
		return err
	}
}

// readAcks reads until the connection fails. Anything but an ack for the
// one outstanding request is a protocol violation.
func (c *serverConn) readAcks() {
	defer close(c.done)
	for {
		msg, fds, err := c.pc.recv(time.Time{})
		if err != nil {
			c.close(err)
			return
		}
		if len(fds) > 0 {
			closeAll(fds)
			c.close(errUnexpectedFD)
			return
		}
		ackErr, err := unmarshalAck(msg)
		if err != nil {
			c.close(err)
			return
		}
		if !c.waiting.CompareAndSwap(true, false) {
			c.close(errors.New("unsolicited ack"))
			return
		}
		c.acks <- ackErr
	}
}

func (c *serverConn) close(err error) {
	c.once.Do(func() {
		c.err = err
		_ = c.pc.c.Close()
	})
}

// dup duplicates f close-on-exec, so the copy outlives the original.
func dup(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicating netns fd: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
