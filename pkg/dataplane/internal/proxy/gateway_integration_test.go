package proxy

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/hbone"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/netnstest"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/podnet"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// Two networks: pod A (10.200.1.2) on net1, pod B (10.200.2.2) on net2,
// and net2's east-west gateway in a namespace of its own (10.200.3.2, its
// "load-balancer address"). The router forwards between all three but
// refuses net1 → net2 directly: pod B is reachable from pod A only
// through the gateway.
const (
	gatewayLB   = "10.200.3.2"
	webHostname = "web.ns-b.svc.cluster.local"
)

type twoNetworks struct {
	*modelNodes
	modelB  *model.Model // what proxy B and the gateway see: they are on net2
	gateway *eastWest
}

// feed gives both models the same view of both clusters.
func feed(ms []*model.Model, gatewayReady bool) {
	for _, m := range ms {
		m.UpsertWorkload(model.Workload{UID: "c1//Pod/ns-a/client", Name: "client", Namespace: "ns-a", ServiceAccount: "client",
			TrustDomain: "cluster.local", Cluster: "c1", Network: "net1", Ready: true, HBONE: true,
			IPs: []netip.Addr{netip.MustParseAddr("10.200.1.2")}})
		m.UpsertWorkload(model.Workload{UID: "c2//Pod/ns-b/server", Name: "server", Namespace: "ns-b", ServiceAccount: "server",
			TrustDomain: "cluster.local", Cluster: "c2", Network: "net2", Ready: true, HBONE: true,
			IPs: []netip.Addr{netip.MustParseAddr("10.200.2.2")}})
		m.UpsertWorkload(model.Workload{UID: "c2//Pod/istio-system/gw", Name: "gw", Namespace: "istio-system", ServiceAccount: "istio-eastwestgateway",
			TrustDomain: "cluster.local", Cluster: "c2", Network: "net2", Ready: gatewayReady,
			IPs: []netip.Addr{netip.MustParseAddr(gatewayLB)}})
		// The service exists in both clusters, its endpoint only in c2.
		m.UpsertService("c1", model.Service{Namespace: "ns-b", Name: "web", Hostname: webHostname,
			VIPs:  []model.NetworkAddr{{Network: "net1", Addr: netip.MustParseAddr(testVIP)}},
			Ports: []model.Port{{Name: "http", Port: 80, TargetPort: 8080}}})
		m.UpsertService("c2", model.Service{Namespace: "ns-b", Name: "web", Hostname: webHostname,
			VIPs:      []model.NetworkAddr{{Network: "net2", Addr: netip.MustParseAddr("10.97.0.20")}},
			Ports:     []model.Port{{Name: "http", Port: 80, TargetPort: 8080}},
			Endpoints: []model.Endpoint{{WorkloadUID: "c2//Pod/ns-b/server", Ready: true}}})
		m.UpsertService("c2", model.Service{Namespace: "istio-system", Name: "istio-eastwestgateway",
			Hostname:   "istio-eastwestgateway.istio-system.svc.cluster.local",
			VIPs:       []model.NetworkAddr{{Network: "net2", Addr: netip.MustParseAddr("10.97.0.99")}},
			Ports:      []model.Port{{Name: "tcp-hbone", Port: 15008, TargetPort: 15008}},
			Endpoints:  []model.Endpoint{{WorkloadUID: "c2//Pod/istio-system/gw", Ready: true}},
			GatewayFor: "net2", LoadBalancer: []netip.Addr{netip.MustParseAddr(gatewayLB)}})
		m.MarkSynced()
	}
}

func newTwoNetworks(t *testing.T, serverSA string) *twoNetworks {
	t.Helper()
	if testing.Short() {
		t.Skip("creates network namespaces and nftables rules; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and nftables")
	}
	e := &twoNetworks{modelNodes: &modelNodes{twoNodes: &twoNodes{t: t}, model: model.New("c1", "net1")}, modelB: model.New("c2", "net2")}
	e.podA, e.podB, e.router = netnsTopology(t)
	gwNS := "mhb-gw-" + strconv.Itoa(os.Getpid())
	_ = runCmd("ip", "netns", "del", gwNS)
	t.Cleanup(func() { _ = runCmd("ip", "netns", "del", gwNS) })
	sh(t, "ip", "netns", "add", gwNS)
	sh(t, "ip", "-n", gwNS, "link", "set", "lo", "up")
	sh(t, "ip", "-n", e.router, "link", "add", "r3", "type", "veth", "peer", "name", "eth0", "netns", gwNS)
	sh(t, "ip", "-n", e.router, "addr", "add", "10.200.3.1/24", "dev", "r3")
	sh(t, "ip", "-n", e.router, "link", "set", "r3", "up")
	sh(t, "ip", "-n", gwNS, "addr", "add", gatewayLB+"/24", "dev", "eth0")
	sh(t, "ip", "-n", gwNS, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", gwNS, "route", "add", "default", "via", "10.200.3.1")
	// Separate networks: net1 reaches net2 only through the gateway.
	sh(t, "ip", "netns", "exec", e.router, "iptables", "-I", "FORWARD", "-s", "10.200.1.0/24", "-d", "10.200.2.0/24",
		"-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset")
	feed([]*model.Model{e.model, e.modelB}, true)

	c, err := meshca.NewTest("gateway-integration")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e.ctx = ctx
	start := func(agent *fakeAgent, m *model.Model, network string) *Proxy {
		p, err := New(WithWorkloadEvents(agent), WithFetcher(certs.FromCA(c, time.Hour, time.Now)),
			WithAddresses("", "", ""), WithMeshCIDRs(netip.MustParsePrefix(testMeshNet)),
			WithDiscovery(Discovery{Network: network}), func(o *options) { o.model = m })
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return p
	}
	agentA, agentB := &fakeAgent{sessions: make(chan chan evReq)}, &fakeAgent{sessions: make(chan chan evReq)}
	e.proxyA, e.proxyB = start(agentA, e.model, "net1"), start(agentB, e.modelB, "net2")
	e.sessionA, e.sessionB = make(chan evReq), make(chan evReq)
	agentA.sessions <- e.sessionA
	agentB.sessions <- e.sessionB
	if err := send(t, e.sessionA, WorkloadEvent{Kind: EventAdd, UID: "a", Name: "client", Namespace: "ns-a", ServiceAccount: "client", Netns: openNetns(t, e.podA)}); err != nil {
		t.Fatal(err)
	}
	if err := send(t, e.sessionB, WorkloadEvent{Kind: EventAdd, UID: "b", Name: "server", Namespace: "ns-b", ServiceAccount: serverSA, Netns: openNetns(t, e.podB)}); err != nil {
		t.Fatal(err)
	}

	// The gateway, serving and dialing in its own namespace.
	gw, err := podnet.Open("/var/run/netns/" + gwNS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	ln, err := gw.Listen(ctx, &net.ListenConfig{}, "tcp", ":15008")
	if err != nil {
		t.Fatal(err)
	}
	e.gateway, err = newEastWest(GatewayConfig{Namespace: "istio-system", ServiceAccount: "istio-eastwestgateway", PodName: "gw", PodUID: "gw-uid"},
		WithFetcher(certs.FromCA(c, time.Hour, time.Now)), WithAddresses("", "", ""),
		withHBONEOptions(hbone.WithDialContext(func(ctx context.Context, network, addr string) (net.Conn, error) {
			return gw.DialContext(ctx, &net.Dialer{}, network, addr)
		})),
		func(o *options) { o.model, o.gatewayListener = e.modelB, ln })
	if err != nil {
		t.Fatal(err)
	}
	gwDone := make(chan struct{})
	go func() { defer close(gwDone); _ = e.gateway.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-gwDone })

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

func runCmd(name string, args ...string) error {
	return exec.Command(name, args...).Run()
}

// registryValue sums a counter of reg whose labels include want.
func registryValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	return labelledValue(t, &Proxy{reg: reg}, name, want)
}

// settled reads a counter until it is want, for a few seconds at most, and
// returns the last value: a tunnel is counted when it ends, which can be
// just after the client read its answer.
func settled(want float64, read func() float64) float64 {
	n := read()
	for i := 0; i < 50 && n != want; i++ {
		time.Sleep(100 * time.Millisecond)
		n = read()
	}
	return n
}

// TestIntegrationOtherNetworkThroughGateway: pod A calls a Service whose
// only endpoint is pod B, on the other network. Proxy A sends it, double
// HBONE, to net2's gateway, which forwards the inner tunnel to proxy B;
// pod B answers (from the gateway's address, as behind Istio's), proxy B
// saw pod A's own identity, and proxy A held pod B to the service's
// identity. Directly, net1 cannot reach pod B at all.
func TestIntegrationOtherNetworkThroughGateway(t *testing.T) {
	e := newTwoNetworks(t, "server")
	nsA := openNetns(t, e.podA)
	defer nsA.Close()
	if err := netnstest.Dial(nsA, "10.200.2.2:8080", "", hbone.DefaultMark); err == nil {
		t.Fatal("pod A reached pod B directly: the networks are not separate")
	}

	if got, err := e.try(testVIP + ":80"); err != nil || got != gatewayLB+"\nvia the model" {
		t.Fatalf("pod a → VIP %s:80 (endpoint on net2): %q, %v", testVIP, got, err)
	}
	if n := settled(1, func() float64 {
		return labelledValue(t, e.proxyA, "meshctl_proxy_outbound_network_gateway_total", map[string]string{"network": "net2", "result": "ok"})
	}); n != 1 {
		t.Errorf("proxy A connections through net2's gateway = %v, want 1", n)
	}
	if n := registryValue(t, e.gateway.Registry(), "meshctl_gateway_tunnels_total", map[string]string{"result": "forwarded"}); n != 1 {
		t.Errorf("gateway tunnels forwarded = %v, want 1", n)
	}
	if n := metricValue(t, e.proxyB, "meshctl_hbone_connections_opened_total", "inbound"); n != 1 {
		t.Errorf("proxy B inbound tunnels = %v, want 1", n)
	}
	var in, out *connRecord
	for _, r := range e.proxyB.Connections() {
		if r.Direction == "inbound" {
			in = &r
		}
	}
	for _, r := range e.proxyA.Connections() {
		if r.Direction == "outbound" {
			out = &r
		}
	}
	if in == nil || in.Peer != "spiffe://cluster.local/ns/ns-a/sa/client" || in.Dst != netip.MustParseAddrPort("10.200.2.2:8080") {
		t.Errorf("proxy B's inbound record %+v: want pod A's identity, to pod B's 8080", in)
	}
	if out == nil || out.Peer != "spiffe://cluster.local/ns/ns-b/sa/server" || out.Gateway != netip.MustParseAddrPort(gatewayLB+":15008") ||
		out.Authority != webHostname+":80" {
		t.Errorf("proxy A's outbound record %+v: want the server's identity required, through the gateway, for the service", out)
	}

	// The gateway's pod not ready: no gateway to trust; refused, counted.
	feed([]*model.Model{e.model}, false)
	if got, _ := e.try(testVIP + ":80"); got != "" {
		t.Errorf("without a usable gateway, pod a got %q", got)
	}
	if n := labelledValue(t, e.proxyA, "meshctl_proxy_outbound_refused_total", map[string]string{"reason": "no_network_gateway"}); n != 1 {
		t.Errorf("refused for want of a gateway = %v, want 1", n)
	}
}

// TestIntegrationOtherNetworkSecureNaming: pod B's proxy presents
// ns-b/attacker where the model says the service's pods are ns-b/server:
// through the gateway too, proxy A refuses the inner tunnel and counts it.
func TestIntegrationOtherNetworkSecureNaming(t *testing.T) {
	e := newTwoNetworks(t, "attacker")
	if got, err := e.try(testVIP + ":80"); got != "" {
		t.Fatalf("pod a reached a server with the wrong identity through the gateway: %q, %v", got, err)
	}
	if n := labelledValue(t, e.proxyA, "meshctl_hbone_handshake_failures_total", map[string]string{"reason": "peer_identity"}); n != 1 {
		t.Errorf("secure-naming refusals = %v, want 1", n)
	}
	if n := settled(1, func() float64 {
		return labelledValue(t, e.proxyA, "meshctl_proxy_outbound_network_gateway_total", map[string]string{"network": "net2", "result": "error"})
	}); n != 1 {
		t.Errorf("failed connections through the gateway = %v, want 1", n)
	}
	if n := metricValue(t, e.proxyB, "meshctl_hbone_connections_opened_total", "inbound"); n != 0 {
		t.Errorf("proxy B inbound tunnels = %v, want 0", n)
	}
}
