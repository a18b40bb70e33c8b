package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/podnet"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/redirect"
	"github.com/meshctl/meshctl/pkg/meshca"
)

func sh(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// netnsTopology: two pods on two "nodes", joined by a router namespace.
//
//	pod-a 10.200.1.2 --veth-- router 10.200.1.1 | 10.200.2.1 --veth-- pod-b 10.200.2.2
//	      fd00:200:1::2            fd00:200:1::1 | fd00:200:2::1          fd00:200:2::2
func netnsTopology(t *testing.T) (podA, podB, router string) {
	t.Helper()
	// Names carry the PID: the same test may run from several checkouts on
	// one machine at once, and must not tear down another run's namespaces.
	sfx := strconv.Itoa(os.Getpid())
	podA, podB, router = "mhb-pod-a-"+sfx, "mhb-pod-b-"+sfx, "mhb-router-"+sfx
	cleanup := func() {
		for _, n := range []string{podA, podB, router} {
			_ = exec.Command("ip", "netns", "del", n).Run()
		}
	}
	cleanup()
	t.Cleanup(cleanup)
	for _, n := range []string{podA, podB, router} {
		sh(t, "ip", "netns", "add", n)
		sh(t, "ip", "-n", n, "link", "set", "lo", "up")
	}
	for i, pod := range []string{podA, podB} {
		subnet := []string{"1", "2"}[i]
		rIf := "r" + subnet
		sh(t, "ip", "-n", router, "link", "add", rIf, "type", "veth", "peer", "name", "eth0", "netns", pod)
		sh(t, "ip", "-n", router, "addr", "add", "10.200."+subnet+".1/24", "dev", rIf)
		sh(t, "ip", "-n", router, "link", "set", rIf, "up")
		sh(t, "ip", "-n", pod, "addr", "add", "10.200."+subnet+".2/24", "dev", "eth0")
		sh(t, "ip", "-n", pod, "link", "set", "eth0", "up")
		sh(t, "ip", "-n", pod, "route", "add", "default", "via", "10.200."+subnet+".1")
		// nodad: the address is usable at once instead of after duplicate detection.
		sh(t, "ip", "-n", router, "addr", "add", "fd00:200:"+subnet+"::1/64", "dev", rIf, "nodad")
		sh(t, "ip", "-n", pod, "addr", "add", "fd00:200:"+subnet+"::2/64", "dev", "eth0", "nodad")
		sh(t, "ip", "-n", pod, "-6", "route", "add", "default", "via", "fd00:200:"+subnet+"::1")
		// The production in-pod rules, as the node agent installs them:
		// capture, bypass mark, and the return route of source preservation.
		ns := openNetns(t, pod)
		err := redirect.New().Apply(ns)
		ns.Close()
		if err != nil {
			t.Fatalf("redirect in %s: %v", pod, err)
		}
	}
	// Forwarding only inside the router namespace, never on the host.
	sh(t, "ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	sh(t, "ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	return podA, podB, router
}

func openNetns(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open("/var/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// twoNodes is the netns topology with a proxy per "node", each serving one
// pod, and in pod B an app that answers with the source address it sees and
// then echoes.
type twoNodes struct {
	t                  *testing.T
	ctx                context.Context
	podA, podB, router string
	proxyA, proxyB     *Proxy
	sessionA, sessionB chan evReq
}

func newTwoNodes(t *testing.T, optsB ...Option) *twoNodes {
	t.Helper()
	if testing.Short() {
		t.Skip("creates network namespaces and nftables rules; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and nftables")
	}
	e := &twoNodes{t: t}
	e.podA, e.podB, e.router = netnsTopology(t)
	c, err := meshca.NewTest("integration")
	if err != nil {
		t.Fatal(err)
	}
	idB := identity.New("cluster.local", "ns-b", "server")
	resolver := func(dst netip.AddrPort) (hboneRoute, bool) {
		if dst.Addr() == netip.MustParseAddr("10.200.2.2") || dst.Addr() == netip.MustParseAddr("fd00:200:2::2") {
			return hboneRoute{Gateway: netip.AddrPortFrom(dst.Addr(), 15008), Identity: idB}, true
		}
		return hboneRoute{}, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e.ctx = ctx
	start := func(agent *fakeAgent, extra ...Option) *Proxy {
		p, err := New(append([]Option{WithWorkloadEvents(agent), WithFetcher(certs.FromCA(c, time.Hour, time.Now)),
			WithAddresses("", "", ""), withResolver(resolver)}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return p
	}
	agentA, agentB := &fakeAgent{sessions: make(chan chan evReq)}, &fakeAgent{sessions: make(chan chan evReq)}
	e.proxyA, e.proxyB = start(agentA), start(agentB, optsB...)
	e.sessionA, e.sessionB = make(chan evReq), make(chan evReq)
	agentA.sessions <- e.sessionA
	agentB.sessions <- e.sessionB
	if err := send(t, e.sessionA, WorkloadEvent{Kind: EventAdd, UID: "a", Name: "client", Namespace: "ns-a", ServiceAccount: "client", Netns: openNetns(t, e.podA)}); err != nil {
		t.Fatal(err)
	}
	if err := send(t, e.sessionB, WorkloadEvent{Kind: EventAdd, UID: "b", Name: "server", Namespace: "ns-b", ServiceAccount: "server", Netns: openNetns(t, e.podB)}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(e.proxyB.Dump().WorkloadState["b"].Addresses); got != "[10.200.2.2 fd00:200:2::2]" {
		t.Fatalf("pod b addresses = %v", got)
	}

	nsB, err := podnet.Open("/var/run/netns/" + e.podB)
	if err != nil {
		t.Fatal(err)
	}
	defer nsB.Close()
	app, err := nsB.Listen(ctx, &net.ListenConfig{}, "tcp", ":8080")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	go func() {
		for {
			conn, err := app.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				host, _, _ := net.SplitHostPort(conn.RemoteAddr().String())
				_, _ = io.WriteString(conn, host+"\n")
				_, _ = io.Copy(conn, conn)
			}()
		}
	}()
	return e
}

// talk connects from namespace ns to addr, sends a message, half-closes and
// returns what the app answered: the source it saw, then the echo.
func (e *twoNodes) talk(ns, addr string) string {
	t := e.t
	t.Helper()
	n, err := podnet.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	dctx, dcancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer dcancel()
	conn, err := n.DialContext(dctx, &net.Dialer{}, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, "over hbone")
	_ = conn.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("from %s to %s: %v (read %q)", ns, addr, err, got)
	}
	return string(got)
}

// TestIntegrationTwoNodesCapturedOverHBONE runs two proxies ("nodes"), each
// serving one pod in its own network namespace. An app in pod A connects to
// pod B's address; nftables REDIRECT captures it into proxy A's 15001, which
// carries it over HBONE to proxy B's 15008 inside pod B, which delivers it —
// from pod A's address, as Istio ambient does (IP_TRANSPARENT and the return
// route of the in-pod rules).
func TestIntegrationTwoNodesCapturedOverHBONE(t *testing.T) {
	e := newTwoNodes(t)
	podA, router, proxyA, proxyB := e.podA, e.router, e.proxyA, e.proxyB

	if got := e.talk(podA, "10.200.2.2:8080"); got != "10.200.1.2\nover hbone" {
		t.Fatalf("pod a → pod b: %q (the app must see pod a's address)", got)
	}
	if n := metricValue(t, proxyA, "meshctl_hbone_connections_opened_total", "outbound"); n != 1 {
		t.Errorf("proxy A outbound tunnels = %v, want 1", n)
	}
	if n := metricValue(t, proxyB, "meshctl_hbone_connections_opened_total", "inbound"); n != 1 {
		t.Errorf("proxy B inbound tunnels = %v, want 1", n)
	}

	// A non-mesh client (the router) → pod B: captured on 15006 and
	// delivered in plaintext, again from the client's own address; the
	// metric proves the connection went through the proxy, not around it.
	if got := e.talk(router, "10.200.2.2:8080"); got != "10.200.2.1\nover hbone" {
		t.Fatalf("router → pod b: %q (the app must see the router's address)", got)
	}
	if n := metricValue(t, proxyB, "meshctl_hbone_connections_opened_total", "inbound"); n != 1 {
		t.Errorf("plaintext inbound counted as HBONE: %v", n)
	}
	if n := metricValue(t, proxyB, "meshctl_hbone_connections_opened_total", "inbound_plaintext"); n != 1 {
		t.Errorf("proxy B inbound plaintext connections = %v, want 1", n)
	}

	// The same over IPv6: SO_ORIGINAL_DST at SOL_IPV6, [v6]:port authority,
	// IPV6_TRANSPARENT and the v6 return route.
	if got := e.talk(podA, "[fd00:200:2::2]:8080"); got != "fd00:200:1::2\nover hbone" {
		t.Fatalf("pod a → pod b over IPv6: %q", got)
	}
	if n := metricValue(t, proxyB, "meshctl_hbone_connections_opened_total", "inbound"); n != 2 {
		t.Errorf("proxy B inbound tunnels after the IPv6 one = %v, want 2", n)
	}
	if got := e.talk(router, "[fd00:200:2::2]:8080"); got != "fd00:200:2::1\nover hbone" {
		t.Fatalf("router → pod b over IPv6: %q", got)
	}
	if n := counterValue(t, proxyB, "meshctl_proxy_source_preservation_fallbacks_total"); n != 0 {
		t.Errorf("source preservation fallbacks = %v, want 0", n)
	}

	// DelWorkload closes pod B's listeners: captured traffic now fails.
	if err := send(t, e.sessionB, WorkloadEvent{Kind: EventDel, UID: "b"}); err != nil {
		t.Fatal(err)
	}
	n, _ := podnet.Open("/var/run/netns/" + router)
	defer n.Close()
	if conn, err := n.DialContext(e.ctx, &net.Dialer{Timeout: 2 * time.Second}, "tcp", "10.200.2.2:8080"); err == nil {
		conn.Close()
		t.Error("pod b still reachable through 15006 after DelWorkload")
	}
}

// TestIntegrationSourcePreservationFallback: without the capability for
// IP_TRANSPARENT (taken away here by failing the setsockopt with EPERM, as the
// kernel does without CAP_NET_ADMIN) connections still get through, from the
// proxy's address, counted in the fallback metric and logged once.
func TestIntegrationSourcePreservationFallback(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := newTwoNodes(t, WithLogger(log), func(o *options) {
		o.setTransparent = func(int, bool) error { return unix.EPERM }
	})
	if got := e.talk(e.podA, "10.200.2.2:8080"); got != "10.200.2.2\nover hbone" {
		t.Fatalf("pod a → pod b without IP_TRANSPARENT: %q (want the proxy's address in pod b)", got)
	}
	if got := e.talk(e.router, "[fd00:200:2::2]:8080"); got != "fd00:200:2::2\nover hbone" {
		t.Fatalf("router → pod b without IP_TRANSPARENT: %q", got)
	}
	if n := counterValue(t, e.proxyB, "meshctl_proxy_source_preservation_fallbacks_total"); n != 2 {
		t.Errorf("source preservation fallbacks = %v, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "source addresses not preserved"); n != 1 {
		t.Errorf("fallback logged %d times, want once:\n%s", n, logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// counterValue reads an unlabelled counter from the proxy's registry.
func counterValue(t *testing.T, p *Proxy, name string) float64 {
	t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// metricValue reads a counter with a direction label from the proxy's registry.
func metricValue(t *testing.T, p *Proxy, name, direction string) float64 {
	t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "direction" && l.GetValue() == direction {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
