package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Namespace is a network namespace held open by a file descriptor (a ZDS
// AddWorkload fd, or /proc/<pid>/ns/net). A nil *Namespace or one without a
// file is the proxy's own namespace, which in-process tests use.
type Namespace struct {
	file *os.File
}

// New wraps an open namespace file; the Namespace owns it from now on.
func New(f *os.File) *Namespace { return &Namespace{file: f} }

// Open opens a namespace by path, e.g. /var/run/netns/<name>.
func Open(path string) (*Namespace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open netns: %w", err)
	}
	return New(f), nil
}

// Own reports whether n is the caller's own namespace (no pod netns file),
// as in in-process tests, where nothing of a pod's set-up exists.
func (n *Namespace) Own() bool { return n == nil || n.file == nil }

// ID identifies the namespace itself, not the file: the device and inode
// of the nsfs file, which two fds for one namespace share and a new
// namespace never reuses while either is open.
type ID struct{ Dev, Ino uint64 }

// ID returns n's identity.
func (n *Namespace) ID() (ID, error) {
	if n == nil || n.file == nil {
		return FileID(nil)
	}
	return FileID(n.file)
}

// FileID returns the identity of the namespace f refers to; a nil f is the
// process's own network namespace.
func FileID(f *os.File) (ID, error) {
	var st unix.Stat_t
	var err error
	if f == nil {
		err = unix.Stat("/proc/self/ns/net", &st)
	} else {
		err = unix.Fstat(int(f.Fd()), &st)
	}
	if err != nil {
		return ID{}, fmt.Errorf("stat netns: %w", err)
	}
	return ID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// Close releases the namespace file.
func (n *Namespace) Close() error {
	if n == nil || n.file == nil {
		return nil
	}
	return n.file.Close()
}

// switching bounds how many goroutines are inside Do at once. A locked
// goroutine that blocks in a system call (opening its thread's namespace,
// setns, socket) makes the runtime start another OS thread for the others,
// and the runtime keeps idle threads: without a bound, a burst of
// concurrent dials (a hostile peer opening thousands of connections)
// leaves one thread per concurrent dial behind, toward the runtime's
// 10,000-thread abort. What runs inside Do is a few system calls, so
// waiting here is short, and the wait parks a goroutine, not a thread.
var switching = make(chan struct{}, 4)

// Do runs fn with the current OS thread inside the namespace. The thread is
// locked for the duration; if switching back fails the thread stays locked,
// so the Go runtime discards it instead of reusing a thread in the wrong
// namespace. fn must be short: at most a few goroutines are inside Do at
// once (see switching).
func (n *Namespace) Do(fn func() error) error {
	if n == nil || n.file == nil {
		return fn()
	}
	switching <- struct{}{}
	defer func() { <-switching }()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(netns.NsHandle(int(n.file.Fd()))); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter pod netns: %w", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Deliberately no UnlockOSThread: the thread dies with its goroutine.
		return errors.Join(ferr, fmt.Errorf("restore netns: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// Listen opens a listener inside the namespace.
func (n *Namespace) Listen(ctx context.Context, lc *net.ListenConfig, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.Do(func() error {
		var err error
		ln, err = lc.Listen(ctx, network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen %s in pod netns: %w", addr, err)
	}
	return ln, nil
}

// DialContext opens a TCP connection from inside the namespace, so the
// source address is the pod's and routing is the pod's; addr must be an
// ip:port literal.
//
// Only socket(2) runs on a thread switched into the namespace (a socket
// stays in the namespace it was created in); the Control hook, bind and
// the non-blocking connect run on any thread and the wait for the
// handshake is Go's netpoller. A dial to an address that never answers
// therefore holds no OS thread: the runtime's limit (10,000) cannot be
// reached by pending dials.
func (n *Namespace) DialContext(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	if n.Own() {
		return d.DialContext(ctx, network, addr)
	}
	c, err := n.dial(ctx, d, network, addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s from pod netns: %w", addr, err)
	}
	return c, nil
}

func (n *Namespace) dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	dst, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("address must be ip:port: %w", err)
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	family, sysNet := unix.AF_INET6, "tcp6"
	if dst.Addr().Is4() {
		family, sysNet = unix.AF_INET, "tcp4"
	}
	if network != "tcp" && network != sysNet {
		return nil, fmt.Errorf("network %q does not fit address %s", network, dst.Addr())
	}
	if !d.Deadline.IsZero() || d.Timeout > 0 {
		var cancel context.CancelFunc
		deadline := d.Deadline
		if d.Timeout > 0 && (deadline.IsZero() || time.Now().Add(d.Timeout).Before(deadline)) {
			deadline = time.Now().Add(d.Timeout)
		}
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}

	var fd int
	err = n.Do(func() error {
		var err error
		fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	// A non-blocking fd: os.NewFile registers it with the netpoller.
	f := os.NewFile(uintptr(fd), "tcp")
	defer f.Close() // net.FileConn below holds its own dup
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	switch {
	case d.ControlContext != nil:
		err = d.ControlContext(ctx, sysNet, addr, rc)
	case d.Control != nil:
		err = d.Control(sysNet, addr, rc)
	}
	if err != nil {
		return nil, err
	}
	if d.LocalAddr != nil {
		la, ok := d.LocalAddr.(*net.TCPAddr)
		if !ok {
			return nil, fmt.Errorf("local address %v is not TCP", d.LocalAddr)
		}
		ap := la.AddrPort()
		if err := sysCall(rc, func(fd int) error { return unix.Bind(fd, sockaddr(netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))) }); err != nil {
			return nil, fmt.Errorf("bind %s: %w", la, err)
		}
	}
	err = sysCall(rc, func(fd int) error { return unix.Connect(fd, sockaddr(dst)) })
	if errors.Is(err, unix.EINPROGRESS) {
		err = waitConnected(ctx, f, rc)
	}
	if err != nil {
		return nil, err
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	// As net.Dialer does: no Nagle, keep-alive unless disabled.
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		if ka := d.KeepAlive; ka >= 0 {
			if ka == 0 {
				ka = 15 * time.Second
			}
			_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: ka, Interval: ka, Count: -1})
		}
	}
	return c, nil
}

// waitConnected waits in the netpoller for a non-blocking connect to end.
func waitConnected(ctx context.Context, f *os.File, rc syscall.RawConn) error {
	// Deadlines are how a wait in the netpoller is cut short.
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = f.SetWriteDeadline(dl)
	}
	var cerr error
	err := rc.Write(func(fd uintptr) bool {
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			cerr = err
			return true
		case v != 0:
			switch e := unix.Errno(v); e {
			case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
				return false
			default:
				cerr = e
				return true
			}
		}
		// Writable with no error can also be a wake-up before the
		// handshake (as in the runtime's own connect): only a peer
		// address proves the connection.
		_, err = unix.Getpeername(int(fd))
		if errors.Is(err, unix.ENOTCONN) {
			return false
		}
		cerr = err
		return true
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return cerr
}

// sysCall runs fn on rc's descriptor.
func sysCall(rc syscall.RawConn, fn func(fd int) error) error {
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	// No zone: a zone names an interface of the pod's netns, which this
	// thread cannot look up; the proxy dials no link-local addresses.
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}

// Addrs returns the namespace's global unicast addresses: the pod IPs, which
// the proxy needs to pick server certificates by destination IP.
func (n *Namespace) Addrs() ([]netip.Addr, error) {
	var out []netip.Addr
	err := n.Do(func() error {
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if p, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(p.IP); ok && ip.Unmap().IsGlobalUnicast() {
					out = append(out, ip.Unmap())
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pod addresses: %w", err)
	}
	return out, nil
}
