package podnet

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
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
