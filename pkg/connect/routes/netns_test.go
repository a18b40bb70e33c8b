package routes

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// netnsExecutor runs commands inside named network namespaces: the nodes of
// this test's "clusters".
type netnsExecutor struct{ prefix string }

func (x netnsExecutor) Exec(ctx context.Context, _, node string, stdin []byte, argv ...string) error {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", x.prefix + node}, argv...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestIntegrationRoutesAcrossNetns builds three "clusters" of network
// namespaces joined by a bridge (the kind network), gives every node a "pod"
// address from its pod CIDR and the control planes a "service" address,
// applies the route plan through the same Executor interface kind nodes use,
// and checks with real TCP connections, v4 and v6: pods reach pods and
// services of same-network clusters, and nothing reaches the cluster on
// another network.
func TestIntegrationRoutesAcrossNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	prefix := fmt.Sprintf("mctl%d-", rand.IntN(1e6))
	x := netnsExecutor{prefix: prefix}
	bridge := prefix + "net"
	sh(t, "ip", "netns", "add", bridge)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", bridge).Run() })
	// Without multicast snooping the bridge floods IPv6 neighbour
	// discovery to fresh ports at once, as docker's bridge does in practice.
	sh(t, "ip", "-n", bridge, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	sh(t, "ip", "-n", bridge, "link", "set", "br0", "up")

	clusters := []Cluster{
		{Name: "c1", Network: "network-1", ServiceSubnets: []netip.Prefix{netip.MustParsePrefix("10.255.10.0/24"), netip.MustParsePrefix("fd00:10:255:10::/112")}},
		{Name: "c2", Network: "network-1", ServiceSubnets: []netip.Prefix{netip.MustParsePrefix("10.255.20.0/24"), netip.MustParsePrefix("fd00:10:255:20::/112")}},
		{Name: "c3", Network: "network-2", ServiceSubnets: []netip.Prefix{netip.MustParsePrefix("10.255.30.0/24"), netip.MustParsePrefix("fd00:10:255:30::/112")}},
	}
	nodesPer := []int{2, 2, 1}
	podIP := map[string][]netip.Addr{} // node → its pod addresses (v4, v6)
	svcIP := map[string][]netip.Addr{} // cluster → a service address on its control plane
	host := 2
	for ci := range clusters {
		c := &clusters[ci]
		for ni := 0; ni < nodesPer[ci]; ni++ {
			name := fmt.Sprintf("%s-n%d", c.Name, ni)
			ns := prefix + name
			sh(t, "ip", "netns", "add", ns)
			t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
			v4 := netip.AddrFrom4([4]byte{192, 168, 77, byte(host)})
			v6 := netip.MustParseAddr(fmt.Sprintf("fd77::%d", host))
			veth := fmt.Sprintf("v%d", host)
			host++
			sh(t, "ip", "-n", bridge, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
			sh(t, "ip", "-n", bridge, "link", "set", veth, "master", "br0", "up")
			sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
			sh(t, "ip", "-n", ns, "addr", "add", v4.String()+"/24", "dev", "eth0")
			sh(t, "ip", "-n", ns, "addr", "add", v6.String()+"/64", "dev", "eth0", "nodad")
			sh(t, "ip", "-n", ns, "link", "set", "eth0", "up")
			// The "pod": an address from the node's pod CIDR on the node's
			// loopback (this kernel has no dummy links).
			pod4 := netip.AddrFrom4([4]byte{10, byte(10 * (ci + 1)), byte(ni), 5})
			pod6 := netip.MustParseAddr(fmt.Sprintf("fd00:10:%d:%d::5", 10*(ci+1), ni))
			sh(t, "ip", "-n", ns, "addr", "add", pod4.String()+"/32", "dev", "lo")
			sh(t, "ip", "-n", ns, "addr", "add", pod6.String()+"/128", "dev", "lo", "nodad")
			podIP[name] = []netip.Addr{pod4, pod6}
			n := Node{Name: name, ControlPlane: ni == 0, IPs: []netip.Addr{v4, v6}, PodCIDRs: []netip.Prefix{
				netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(10 * (ci + 1)), byte(ni), 0}), 24),
				netip.MustParsePrefix(fmt.Sprintf("fd00:10:%d:%d::/64", 10*(ci+1), ni)),
			}}
			if ni == 0 {
				s4 := netip.AddrFrom4([4]byte{10, 255, byte(10 * (ci + 1)), 10})
				s6 := netip.MustParseAddr(fmt.Sprintf("fd00:10:255:%d::10", 10*(ci+1)))
				sh(t, "ip", "-n", ns, "addr", "add", s4.String()+"/32", "dev", "lo")
				sh(t, "ip", "-n", ns, "addr", "add", s6.String()+"/128", "dev", "lo", "nodad")
				svcIP[c.Name] = []netip.Addr{s4, s6}
			}
			c.Nodes = append(c.Nodes, n)
		}
	}

	plan, err := RoutePlan(clusters)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Apply(ctx, x, plan); err != nil {
		t.Fatal(err)
	}
	// Idempotent: a second run changes nothing and does not fail.
	before := routes(t, prefix+"c1-n1")
	if err := Apply(ctx, x, plan); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if after := routes(t, prefix+"c1-n1"); after != before {
		t.Errorf("second apply changed routes:\n%s\n→\n%s", before, after)
	}

	for _, tc := range []struct {
		from, to string
		dst      []netip.Addr
		reach    bool
	}{
		{"c1-n1", "c2-n1 pod", podIP["c2-n1"], true},
		{"c2-n0", "c1-n1 pod", podIP["c1-n1"], true},
		{"c1-n0", "c2 service", svcIP["c2"], true},
		{"c2-n1", "c1 service", svcIP["c1"], true},
		{"c1-n1", "c3-n0 pod (other network)", podIP["c3-n0"], false},
		{"c3-n0", "c1-n0 pod (other network)", podIP["c1-n0"], false},
	} {
		for i, dst := range tc.dst {
			src := podIP[tc.from][i]
			err := connect(t, prefix+tc.from, src, prefix+nodeOf(tc.to, podIP, svcIP), dst)
			// A first IPv6 packet may wait on neighbour discovery: a
			// reachable pair gets two more tries, an unreachable one fails
			// at once ("no route") and needs none.
			for try := 0; tc.reach && err != nil && try < 2; try++ {
				err = connect(t, prefix+tc.from, src, prefix+nodeOf(tc.to, podIP, svcIP), dst)
			}
			if tc.reach && err != nil {
				t.Errorf("%s (%s) → %s (%s): %v", tc.from, src, tc.to, dst, err)
			}
			if !tc.reach && err == nil {
				t.Errorf("%s (%s) → %s (%s): reachable across networks", tc.from, src, tc.to, dst)
			}
		}
	}
}

// nodeOf names the namespace that holds a destination.
func nodeOf(desc string, _, _ map[string][]netip.Addr) string {
	f := strings.Fields(desc)[0]
	if strings.Contains(f, "-") {
		return f
	}
	return f + "-n0" // services live on the control plane
}

func routes(t *testing.T, ns string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", "ip -n "+ns+" route show; ip -n "+ns+" -6 route show").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return string(out)
}

// inNetns runs fn on a thread inside the named namespace.
func inNetns(name string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return err
	}
	defer netns.Set(orig) //nolint:errcheck // restoring the test's own netns
	return fn()
}

// connect opens a TCP connection from src in one namespace to dst in
// another, where a listener answers with one byte.
func connect(t *testing.T, fromNS string, src netip.Addr, toNS string, dst netip.Addr) error {
	t.Helper()
	var ln net.Listener
	if err := inNetns(toNS, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(dst, 0).String())
		return err
	}); err != nil {
		t.Fatalf("listening in %s on %s: %v", toNS, dst, err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte{1})
			c.Close()
		}
	}()
	return inNetns(fromNS, func() error {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		b := make([]byte, 1)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(b)
		return err
	})
}
