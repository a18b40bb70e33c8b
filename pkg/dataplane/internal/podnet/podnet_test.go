package podnet

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/netnstest"
)

// TestIntegrationListenInNetns creates a network namespace, opens a listener
// in it, and checks the listener is invisible from the host namespace but
// reachable from inside, and that the namespace's address is reported.
func TestIntegrationListenInNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("creates network namespaces; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	// PID-suffixed: concurrent runs from other checkouts must not collide.
	name := "meshctl-podnet-" + strconv.Itoa(os.Getpid())
	hostIf := "mpn" + strconv.Itoa(os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	run("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	run("-n", name, "link", "set", "lo", "up")
	run("link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", name)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	run("-n", name, "addr", "add", "10.199.0.5/32", "dev", "eth0")
	run("-n", name, "link", "set", "eth0", "up")

	ns, err := Open("/var/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	addrs, err := ns.Addrs()
	if err != nil || len(addrs) != 1 || addrs[0].String() != "10.199.0.5" {
		t.Fatalf("Addrs = %v, %v; want [10.199.0.5]", addrs, err)
	}
	ln, err := ns.Listen(context.Background(), &net.ListenConfig{}, "tcp", "127.0.0.1:15001")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.WriteString(c, "inside")
			c.Close()
		}
	}()
	// From the host namespace, the pod's loopback listener does not exist
	// (unless the host itself happens to listen there).
	if hc, err := net.Dial("tcp", "127.0.0.1:15001"); err == nil {
		hc.Close()
		t.Log("host also listens on 127.0.0.1:15001; skipping the isolation check")
	}
	c, err := ns.DialContext(context.Background(), &net.Dialer{}, "tcp", "127.0.0.1:15001")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, _ := io.ReadAll(c)
	if string(got) != "inside" {
		t.Fatalf("read %q from the pod's listener", got)
	}
	// The calling goroutine is back in the host namespace.
	hostAddrs, err := (*Namespace)(nil).Addrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range hostAddrs {
		if a.String() == "10.199.0.5" {
			t.Fatal("host namespace sees the pod address: the thread was not restored")
		}
	}
}

// TestIntegrationPendingDialsHoldNoThreads dials, from a namespace, an
// address that never answers many times at once, and counts the process's
// OS threads while every dial waits for its handshake. A dial that waits on
// a thread locked into the namespace costs one thread per dial, and at
// 10,000 the runtime aborts the process; waiting in the netpoller costs none.
func TestIntegrationPendingDialsHoldNoThreads(t *testing.T) {
	netnstest.Require(t)
	f, peer := netnstest.New(t), netnstest.New(t)
	if err := netnstest.Veth(f, "eth0", netip.MustParsePrefix("10.202.0.1/24"), peer, "eth0", netip.MustParsePrefix("10.202.0.3/24")); err != nil {
		t.Fatal(err)
	}
	// The black hole: 10.202.0.2 resolves to a MAC nobody has, so the
	// peer drops every SYN and no answer ever comes.
	err := netnstest.Do(f, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		mac, _ := net.ParseMAC("02:00:00:00:02:02")
		return netlink.NeighAdd(&netlink.Neigh{LinkIndex: l.Attrs().Index, State: netlink.NUD_PERMANENT,
			IP: net.ParseIP("10.202.0.2"), HardwareAddr: mac})
	})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	ns := New(os.NewFile(uintptr(fd), "netns"))
	defer ns.Close()

	before := threads(t)
	const dials = 500
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, dials)
	for range dials {
		go func() {
			c, err := ns.DialContext(ctx, &net.Dialer{}, "tcp", "10.202.0.2:80")
			if err == nil {
				c.Close()
			}
			errs <- err
		}()
	}
	for synSent(t, f) < dials {
		time.Sleep(10 * time.Millisecond)
	}
	during := threads(t)
	cancel()
	for range dials {
		if err := <-errs; err == nil {
			t.Fatal("a dial to the black hole connected")
		}
	}
	t.Logf("OS threads: %d before, %d with %d dials pending", before, during, dials)
	// The runtime may start a thread per P to run the dialing goroutines,
	// and Do locks at most 4 more briefly for socket(2) (the runtime keeps
	// idle threads): never one per pending dial, nor one per dial that
	// entered the namespace at the same time (CI's many-core machine grew
	// 101 threads so before Do was bounded).
	if limit := runtime.GOMAXPROCS(0) + 16; during-before > limit {
		t.Fatalf("OS threads grew from %d to %d with %d pending dials: each dial holds a thread", before, during, dials)
	}
}

// threads is the process's OS thread count.
func threads(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// synSent counts the TCP sockets of netns f in SYN_SENT.
func synSent(t *testing.T, f *os.File) int {
	t.Helper()
	n := 0
	err := netnstest.Do(f, func() error {
		data, err := os.ReadFile("/proc/thread-self/net/tcp")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(data), "\n")[1:] {
			if fs := strings.Fields(l); len(fs) > 3 && fs[3] == "02" {
				n++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
