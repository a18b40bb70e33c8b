package probesnat

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/netnstest"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/redirect"
)

// A "node" netns probes a meshed "pod" netns over a veth. Without the SNAT
// the probe is captured by the in-pod rules; with it, it reaches the app
// from 169.254.7.127, and forwarded traffic would not be touched.
func TestIntegrationProbeSNATRealTraffic(t *testing.T) {
	netnstest.Require(t)
	nodeNS, podNS := netnstest.New(t), netnstest.New(t)
	if err := netnstest.Veth(nodeNS, "vethpod", netip.MustParsePrefix("10.98.0.1/24"),
		podNS, "eth0", netip.MustParsePrefix("10.98.0.2/24")); err != nil {
		t.Fatal(err)
	}
	// IPv6 too, without duplicate address detection (a tentative address
	// cannot be used for a second or two).
	addV6 := func(ns *os.File, link, addr string) {
		t.Helper()
		err := netnstest.Do(ns, func() error {
			l, err := netlink.LinkByName(link)
			if err != nil {
				return err
			}
			a, err := netlink.ParseAddr(addr)
			if err != nil {
				return err
			}
			a.Flags = unix.IFA_F_NODAD
			return netlink.AddrAdd(l, a)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	addV6(nodeNS, "vethpod", "fd00:98::1/64")
	addV6(podNS, "eth0", "fd00:98::2/64")
	// As in a cluster, the pod's default routes are the node, which is how
	// replies to the probe sources get back to be un-NATed.
	err := netnstest.Do(podNS, func() error {
		if err := netlink.RouteAdd(&netlink.Route{Gw: net.ParseIP("10.98.0.1")}); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{Gw: net.ParseIP("fd00:98::1")})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := redirect.New().Apply(podNS); err != nil {
		t.Fatal(err)
	}

	type arrival struct{ listener, from string }
	got := make(chan arrival, 4)
	for name, addr := range map[string]string{"app": ":8080", "inbound": ":15006"} {
		ln := netnstest.Listen(t, podNS, addr)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				got <- arrival{name, c.RemoteAddr().(*net.TCPAddr).IP.String()}
				c.Close()
			}
		}()
	}
	probeTo := func(dst, want, wantFrom string) {
		t.Helper()
		if err := netnstest.Dial(nodeNS, dst, "", 0); err != nil {
			t.Fatalf("probe %s: %v", dst, err)
		}
		select {
		case a := <-got:
			if a.listener != want || (wantFrom != "" && a.from != wantFrom) {
				t.Fatalf("probe to %s arrived on %s from %s, want %s from %q", dst, a.listener, a.from, want, wantFrom)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("probe to %s arrived nowhere", dst)
		}
	}
	probe := func(want, wantFrom string) {
		t.Helper()
		probeTo("10.98.0.2:8080", want, wantFrom)
	}
	probe6 := func(want, wantFrom string) {
		t.Helper()
		probeTo("[fd00:98::2]:8080", want, wantFrom)
	}

	const v6Source = "fd16:9254:7127:1337:ffff:ffff:ffff:ffff"
	pod4, pod6 := netip.MustParseAddr("10.98.0.2"), netip.MustParseAddr("fd00:98::2")
	probe("inbound", "") // no SNAT yet: captured like any inbound traffic
	probe6("inbound", "")
	s := New(WithNetns(nodeNS))
	if err := s.Setup(); err != nil {
		t.Fatal(err)
	}
	probe("inbound", "") // pod not in the sets
	probe6("inbound", "")
	if err := s.AddPod(pod4, pod6); err != nil {
		t.Fatal(err)
	}
	probe("app", "169.254.7.127")
	probe6("app", v6Source)
	// A restarted agent re-creates the table with the pods it knows.
	if err := s.Setup(pod4, pod6); err != nil {
		t.Fatal(err)
	}
	probe("app", "169.254.7.127")
	probe6("app", v6Source)
	if err := s.RemovePod(pod4, pod6); err != nil {
		t.Fatal(err)
	}
	if err := s.RemovePod(pod4, pod6); err != nil {
		t.Fatalf("second RemovePod: %v", err)
	}
	probe("inbound", "")
	probe6("inbound", "")
	if err := s.Teardown(); err != nil {
		t.Fatal(err)
	}
	if err := s.Teardown(); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
}
