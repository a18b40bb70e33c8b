package proxy

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/netnstest"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/redirect"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// blackholePod is a pod netns with the in-pod rules whose peer never
// answers 10.203.0.2: it resolves to a MAC nobody has.
func blackholePod(t *testing.T) *os.File {
	t.Helper()
	pod, peer := netnstest.New(t), netnstest.New(t)
	if err := netnstest.Veth(pod, "eth0", netip.MustParsePrefix("10.203.0.1/24"), peer, "eth0", netip.MustParsePrefix("10.203.0.3/24")); err != nil {
		t.Fatal(err)
	}
	err := netnstest.Do(pod, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		mac, _ := net.ParseMAC("02:00:00:00:03:02")
		return netlink.NeighAdd(&netlink.Neigh{LinkIndex: l.Attrs().Index, State: netlink.NUD_PERMANENT,
			IP: net.ParseIP("10.203.0.2"), HardwareAddr: mac})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := redirect.New().Apply(pod); err != nil {
		t.Fatalf("redirect: %v", err)
	}
	return pod
}

// sockets reads the pod's TCP tables: connects in progress (SYN_SENT) and
// the accept backlog of the outbound capture listener on 15001.
func sockets(t *testing.T, pod *os.File) (synSent, backlog int) {
	t.Helper()
	err := netnstest.Do(pod, func() error {
		for _, table := range []string{"tcp", "tcp6"} {
			data, err := os.ReadFile("/proc/thread-self/net/" + table)
			if err != nil {
				return err
			}
			for _, l := range strings.Split(string(data), "\n")[1:] {
				fs := strings.Fields(l)
				if len(fs) < 5 {
					continue
				}
				switch {
				case fs[3] == "02":
					synSent++
				case fs[3] == "0A" && strings.HasSuffix(fs[1], ":3A99"): // LISTEN on 15001
					_, rx, _ := strings.Cut(fs[4], ":")
					n, _ := strconv.ParseInt(rx, 16, 64)
					backlog += int(n)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return synSent, backlog
}

func limitedProxy(t *testing.T, pod *os.File, dials, conns int) *Proxy {
	t.Helper()
	c, err := meshca.NewTest("limits")
	if err != nil {
		t.Fatal(err)
	}
	agent := &fakeAgent{sessions: make(chan chan evReq)}
	p, err := New(WithWorkloadEvents(agent), WithFetcher(certs.FromCA(c, time.Hour, time.Now)), WithAddresses("", "", ""),
		withWorkloadLimits(dials, conns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	s := make(chan evReq)
	agent.sessions <- s
	if err := send(t, s, WorkloadEvent{Kind: EventAdd, UID: "uid-1", Name: "app", Namespace: "ns", ServiceAccount: "sa", Netns: dupFile(t, pod)}); err != nil {
		t.Fatal(err)
	}
	return p
}

// appDials opens n connections from the pod's app to the black hole; each
// is captured into the proxy's 15001 (the kernel completes the handshake
// for the backlog whether or not the proxy accepts).
func appDials(t *testing.T, pod *os.File, n int) {
	t.Helper()
	for range n {
		err := netnstest.Do(pod, func() error {
			c, err := net.Dial("tcp", "10.203.0.2:80")
			if err == nil {
				t.Cleanup(func() { c.Close() })
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestIntegrationDialsPerWorkloadAreCapped: a pod opens 10 connections to
// an address that never answers; with room for 4 connects, the proxy has 4
// in progress and refuses the other 6 at once.
func TestIntegrationDialsPerWorkloadAreCapped(t *testing.T) {
	netnstest.Require(t)
	pod := blackholePod(t)
	p := limitedProxy(t, pod, 4, 100)
	appDials(t, pod, 10)
	for {
		syn, _ := sockets(t, pod)
		if syn > 4 {
			t.Fatalf("%d connects in progress, cap 4", syn)
		}
		if syn == 4 && counterValue(t, p, "meshctl_proxy_dials_refused_total") == 6 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIntegrationAcceptsPerWorkloadAreCapped: with room for 3 captured
// connections per port, 3 of the pod's 10 are served (each one a pending connect)
// and 7 wait in the listener's backlog.
func TestIntegrationAcceptsPerWorkloadAreCapped(t *testing.T) {
	netnstest.Require(t)
	pod := blackholePod(t)
	limitedProxy(t, pod, 100, 3)
	appDials(t, pod, 10)
	for {
		syn, backlog := sockets(t, pod)
		if syn > 3 {
			t.Fatalf("%d captured connections served, cap 3", syn)
		}
		if syn == 3 && backlog == 7 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
