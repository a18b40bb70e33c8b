package probesnat

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/netnstest"
	"github.com/meshctl/meshctl/pkg/dataplane/redirect"
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
	// As in a cluster, the pod's default route is the node, which is how
	// replies to 169.254.7.127 get back to be un-NATed.
	err := netnstest.Do(podNS, func() error {
		return netlink.RouteAdd(&netlink.Route{Gw: net.ParseIP("10.98.0.1")})
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
	probe := func(want, wantFrom string) {
		t.Helper()
		if err := netnstest.Dial(nodeNS, "10.98.0.2:8080", "", 0); err != nil {
			t.Fatalf("probe: %v", err)
		}
		select {
		case a := <-got:
			if a.listener != want || (wantFrom != "" && a.from != wantFrom) {
				t.Fatalf("probe arrived on %s from %s, want %s from %q", a.listener, a.from, want, wantFrom)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("probe arrived nowhere")
		}
	}

	probe("inbound", "") // no SNAT yet: captured like any inbound traffic
	s := New(WithNetns(nodeNS))
	if err := s.Setup(); err != nil {
		t.Fatal(err)
	}
	probe("inbound", "") // pod not in the set
	if err := s.AddPod(netip.MustParseAddr("10.98.0.2"), netip.MustParseAddr("fd00::2")); err != nil {
		t.Fatal(err)
	}
	probe("app", "169.254.7.127")
	// A restarted agent re-creates the table with the pods it knows.
	if err := s.Setup(netip.MustParseAddr("10.98.0.2")); err != nil {
		t.Fatal(err)
	}
	probe("app", "169.254.7.127")
	if err := s.RemovePod(netip.MustParseAddr("10.98.0.2")); err != nil {
		t.Fatal(err)
	}
	if err := s.RemovePod(netip.MustParseAddr("10.98.0.2")); err != nil {
		t.Fatalf("second RemovePod: %v", err)
	}
	probe("inbound", "")
	if err := s.Teardown(); err != nil {
		t.Fatal(err)
	}
	if err := s.Teardown(); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
}
