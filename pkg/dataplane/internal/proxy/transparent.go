package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/hbone"
)

// Source preservation, as ztunnel's in-pod mode does it: an inbound
// connection (from HBONE or captured plaintext) reaches the app from the
// client's own address, not the proxy's. The upstream socket is opened in
// the pod's netns with IP_TRANSPARENT and bound to the client's address; the
// pod's redirection rules (package redirect: connection mark 0x111, policy
// route table 100) bring the app's replies back to that socket over lo.
//
// IP_TRANSPARENT needs CAP_NET_ADMIN. Without it the proxy falls back to its
// own address, logs that once, and counts every connection delivered so in
// meshctl_proxy_source_preservation_fallbacks_total.

var errNoTransparent = errors.New("IP_TRANSPARENT not permitted")

// setTransparent sets IP_TRANSPARENT (IPV6_TRANSPARENT on a v6 socket).
func setTransparent(fd int, v6 bool) error {
	if v6 {
		return unix.SetsockoptInt(fd, unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
	}
	return unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_TRANSPARENT, 1)
}

// dialUpstream connects to dst inside w's netns for a connection that came
// from src, preserving src when it can.
func (p *Proxy) dialUpstream(ctx context.Context, w *workload, src netip.Addr, dst netip.AddrPort) (net.Conn, error) {
	release, err := p.dialSlot(w)
	if err != nil {
		return nil, err
	}
	defer release()
	src, dst = src.Unmap(), netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if p.preserves(w, src, dst) {
		c, err := w.ns.DialContext(ctx, p.transparentDialer(src), network(dst), dst.String())
		if !errors.Is(err, errNoTransparent) {
			return c, err
		}
		if p.noTransparent.CompareAndSwap(false, true) {
			p.opts.log.Warn("source addresses not preserved: apps see the proxy's address (IP_TRANSPARENT needs CAP_NET_ADMIN)", "err", err)
		}
	}
	if p.shouldPreserve(w, src, dst) {
		p.fallbacks.Inc()
	}
	return w.ns.DialContext(ctx, p.markedDialer(), "tcp", dst.String())
}

// shouldPreserve: the connection is one whose source the app should see:
// a real pod (in-process "pods" have no return route), a client address of
// the destination's family that is neither loopback nor the pod's own.
func (p *Proxy) shouldPreserve(w *workload, src netip.Addr, dst netip.AddrPort) bool {
	return p.opts.preserveSource && !w.ns.Own() && src.IsValid() && !src.IsLoopback() && !src.IsUnspecified() &&
		src.Is4() == dst.Addr().Is4() && src != dst.Addr() && !slices.Contains(w.addrs, src)
}

// preserves: it should, and the capability has not been found missing.
func (p *Proxy) preserves(w *workload, src netip.Addr, dst netip.AddrPort) bool {
	return p.shouldPreserve(w, src, dst) && !p.noTransparent.Load()
}

func (p *Proxy) markedDialer() *net.Dialer {
	return &net.Dialer{Control: hbone.MarkControl(p.opts.mark)}
}

// transparentDialer binds to src (any port) on an IP_TRANSPARENT socket that
// also carries the bypass mark: the mark keeps the SYN out of the pod's
// REDIRECT rules and is what the rules recognise the connection by.
func (p *Proxy) transparentDialer(src netip.Addr) *net.Dialer {
	set := p.opts.setTransparent
	return &net.Dialer{
		LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)),
		Control: func(network, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				if err := set(int(fd), network == "tcp6"); err != nil {
					serr = fmt.Errorf("%w: %w", errNoTransparent, err)
					return
				}
				if p.opts.mark != 0 {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, p.opts.mark)
				}
			})
			return errors.Join(err, serr)
		},
	}
}

func network(dst netip.AddrPort) string {
	if dst.Addr().Is4() {
		return "tcp4"
	}
	return "tcp6"
}
