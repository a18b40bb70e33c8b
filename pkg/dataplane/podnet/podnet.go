package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
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

// Close releases the namespace file.
func (n *Namespace) Close() error {
	if n == nil || n.file == nil {
		return nil
	}
	return n.file.Close()
}

// Do runs fn with the current OS thread inside the namespace. The thread is
// locked for the duration; if switching back fails the thread stays locked,
// so the Go runtime discards it instead of reusing a thread in the wrong
// namespace.
func (n *Namespace) Do(fn func() error) error {
	if n == nil || n.file == nil {
		return fn()
	}
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

// DialContext opens a connection from inside the namespace, so the source
// address is the pod's and routing is the pod's.
func (n *Namespace) DialContext(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s from pod netns: %w", addr, err)
	}
	return c, nil
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
