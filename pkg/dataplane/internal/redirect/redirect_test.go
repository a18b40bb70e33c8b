package redirect

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/netnstest"
)

// arrival is one accepted connection: which listener got it and where the
// client believed it was going.
type arrival struct {
	listener string
	origDst  netip.AddrPort
	origErr  error
}

// listen opens a TCP listener inside ns that reports every accept.
func listen(t *testing.T, ns *os.File, name, addr string, got chan<- arrival) {
	t.Helper()
	ln := netnstest.Listen(t, ns, addr)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			od, oerr := OriginalDestination(c.(*net.TCPConn))
			got <- arrival{listener: name, origDst: od, origErr: oerr}
			c.Close()
		}
	}()
}

func TestIntegrationRedirectRealTraffic(t *testing.T) {
	netnstest.Require(t)
	pod, peer := netnstest.New(t), netnstest.New(t)
	if err := netnstest.Veth(pod, "eth0", netip.MustParsePrefix("10.99.0.1/24"),
		peer, "peer0", netip.MustParsePrefix("10.99.0.2/24")); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		ns   *os.File
		link string
		addr string
	}{{pod, "eth0", "fd00:99::1/64"}, {peer, "peer0", "fd00:99::2/64"}} {
		err := netnstest.Do(a.ns, func() error {
			l, err := netlink.LinkByName(a.link)
			if err != nil {
				return err
			}
			addr, err := netlink.ParseAddr(a.addr)
			if err != nil {
				return err
			}
			addr.Flags = unix.IFA_F_NODAD // usable at once, without duplicate detection
			return netlink.AddrAdd(l, addr)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The peer plays the node too: kubelet probes come from the probe
	// address, which the pod routes back over eth0.
	err := netnstest.Do(peer, func() error { return netnstest.AddrAdd("peer0", netip.MustParsePrefix("169.254.7.127/32")) })
	if err != nil {
		t.Fatal(err)
	}
	err = netnstest.Do(pod, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR("169.254.7.127/32")
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst})
	})
	if err != nil {
		t.Fatal(err)
	}

	got := make(chan arrival, 8)
	listen(t, pod, "outbound", ":15001", got)
	listen(t, pod, "inbound", ":15006", got)
	listen(t, pod, "hbone", ":15008", got)
	listen(t, pod, "app", ":8080", got)
	listen(t, peer, "remote", "10.99.0.2:80", got)

	r := New()
	for range 2 { // applying twice must be harmless: agent restarts do it
		if err := r.Apply(pod); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := r.Installed(pod); err != nil || !ok {
		t.Fatalf("Installed = %v, %v", ok, err)
	}

	cases := []struct {
		name      string
		from      *os.File
		dst, src  string
		mark      int
		listener  string
		wantOrig  string // empty: not redirected, no SO_ORIGINAL_DST to check
		afterRemv bool
	}{
		{name: "pod outbound is captured", from: pod, dst: "10.99.0.2:80", listener: "outbound", wantOrig: "10.99.0.2:80"},
		{name: "proxy's marked socket bypasses", from: pod, dst: "10.99.0.2:80", mark: BypassMark, listener: "remote"},
		{name: "mark bits outside 0xfff do not matter", from: pod, dst: "10.99.0.2:80", mark: 0x1539, listener: "remote"},
		{name: "pod to itself over loopback stays", from: pod, dst: "127.0.0.1:8080", listener: "app"},
		{name: "pod to its own IP stays", from: pod, dst: "10.99.0.1:8080", listener: "app"},
		{name: "inbound plaintext is captured", from: peer, dst: "10.99.0.1:8080", listener: "inbound", wantOrig: "10.99.0.1:8080"},
		{name: "inbound HBONE is untouched", from: peer, dst: "10.99.0.1:15008", listener: "hbone"},
		{name: "kubelet probe is exempt", from: peer, dst: "10.99.0.1:8080", src: "169.254.7.127", listener: "app"},
	}
	check := func(name string, from *os.File, dst, src string, mark int, listener, wantOrig string) {
		t.Helper()
		if err := netnstest.Dial(from, dst, src, mark); err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		select {
		case a := <-got:
			if a.listener != listener {
				t.Errorf("%s: arrived on %s, want %s", name, a.listener, listener)
			}
			if wantOrig != "" && (a.origErr != nil || a.origDst.String() != wantOrig) {
				t.Errorf("%s: SO_ORIGINAL_DST = %v, %v; want %s", name, a.origDst, a.origErr, wantOrig)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("%s: nothing arrived", name)
		}
	}
	for _, c := range cases {
		check(c.name, c.from, c.dst, c.src, c.mark, c.listener, c.wantOrig)
	}

	// Source preservation: a marked IP_TRANSPARENT socket in the pod, bound
	// to the peer's address, reaches the pod's app, which sees the peer's
	// address and whose replies come back to that socket rather than
	// leaving through eth0 towards the real peer.
	if seen, err := transparentRoundTrip(pod, "10.99.0.2", "10.99.0.1:9090"); err != nil || seen != "10.99.0.2" {
		t.Errorf("transparent connection to the app: saw %q, %v; want 10.99.0.2", seen, err)
	}
	if seen, err := transparentRoundTrip(pod, "fd00:99::2", "[fd00:99::1]:9090"); err != nil || seen != "fd00:99::2" {
		t.Errorf("transparent IPv6 connection to the app: saw %q, %v; want fd00:99::2", seen, err)
	}
	if n, err := returnRules(pod); err != nil || n != 2 {
		t.Errorf("return rules after two Applies = %d, %v; want one per family", n, err)
	}

	if err := r.Remove(pod); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(pod); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if ok, err := r.Installed(pod); err != nil || ok {
		t.Fatalf("Installed after Remove = %v, %v", ok, err)
	}
	if n, err := returnRules(pod); err != nil || n != 0 {
		t.Errorf("return rules after Remove = %d, %v; want none", n, err)
	}
	check("after Remove outbound goes direct", pod, "10.99.0.2:80", "", 0, "remote", "")
	check("after Remove inbound goes direct", peer, "10.99.0.1:8080", "", 0, "app", "")
}

// TestIntegrationApplyWithIPv6Disabled: a pod without IPv6 (disable_ipv6)
// gets its rules; only the IPv6 return route, which it cannot use, is left out.
func TestIntegrationApplyWithIPv6Disabled(t *testing.T) {
	netnstest.Require(t)
	pod := netnstest.New(t)
	err := netnstest.Do(pod, func() error {
		for _, f := range []string{"all", "default", "lo"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+f+"/disable_ipv6", []byte("1"), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Skipf("cannot disable IPv6 in a netns here: %v", err)
	}
	r := New()
	if err := r.Apply(pod); err != nil {
		t.Fatalf("Apply with IPv6 disabled: %v", err)
	}
	if err := r.Remove(pod); err != nil {
		t.Fatalf("Remove with IPv6 disabled: %v", err)
	}
}

func TestApplyFailsOnANonNetnsFd(t *testing.T) {
	t.Parallel()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := New().Apply(f); err == nil {
		t.Fatal("Apply on /dev/null succeeded")
	}
}

// transparentRoundTrip listens on dst inside ns, connects to it from src with
// the proxy's socket options (bypass mark, IP_TRANSPARENT) and returns the
// source address the listener saw, after one byte went each way.
func transparentRoundTrip(ns *os.File, src, dst string) (string, error) {
	seen := make(chan string, 1)
	var ln net.Listener
	err := netnstest.Do(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", dst)
		return err
	})
	if err != nil {
		return "", err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		seen <- host
		b := make([]byte, 1)
		if _, err := c.Read(b); err == nil {
			_, _ = c.Write(b)
		}
	}()
	err = netnstest.Do(ns, func() error {
		v6 := strings.Contains(src, ":")
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)},
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) {
					lvl, opt := unix.SOL_IP, unix.IP_TRANSPARENT
					if v6 {
						lvl, opt = unix.SOL_IPV6, unix.IPV6_TRANSPARENT
					}
					serr = errors.Join(unix.SetsockoptInt(int(fd), lvl, opt, 1),
						unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, BypassMark))
				})
				return errors.Join(err, serr)
			}}
		c, err := d.Dial("tcp", dst)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte{1}); err != nil {
			return err
		}
		_, err = io.ReadFull(c, make([]byte, 1))
		return err
	})
	if err != nil {
		return "", err
	}
	return <-seen, nil
}

// returnRules counts the source-preservation policy rules in ns.
func returnRules(ns *os.File) (int, error) {
	h, err := netlinkIn(ns)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	n := 0
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		rules, err := h.RuleList(family)
		if err != nil {
			return 0, err
		}
		for _, r := range rules {
			if r.Table == ReturnTable && r.Mark == ReturnMark {
				n++
			}
		}
	}
	return n, nil
}
