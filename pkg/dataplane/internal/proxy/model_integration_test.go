package proxy

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/podnet"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// modelNodes is the two-node netns topology with a proxy per node routed
// by one service model, no resolver: pod A (ns-a/client) is the client,
// pod B runs an app on :8080 served by a proxy that presents serverSA.
type modelNodes struct {
	*twoNodes
	model *model.Model
}

// Addresses only the model knows: the VIP is routed nowhere.
const (
	testVIP     = "10.96.0.10"
	testMeshNet = "10.200.0.0/16"
)

func newModelNodes(t *testing.T, serverSA string) *modelNodes {
	t.Helper()
	if testing.Short() {
		t.Skip("creates network namespaces and nftables rules; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and nftables")
	}
	e := &modelNodes{twoNodes: &twoNodes{t: t}, model: model.New("c1", "net1")}
	e.podA, e.podB, e.router = netnsTopology(t)

	// The model says ns-b/web's pod is ns-b/server, whatever its proxy
	// presents.
	m := e.model
	m.UpsertWorkload(model.Workload{UID: "c1//Pod/ns-a/client", Name: "client", Namespace: "ns-a", ServiceAccount: "client",
		TrustDomain: "cluster.local", Cluster: "c1", Network: "net1", Ready: true, HBONE: true,
		IPs: []netip.Addr{netip.MustParseAddr("10.200.1.2"), netip.MustParseAddr("fd00:200:1::2")}})
	m.UpsertWorkload(model.Workload{UID: "c2//Pod/ns-b/server", Name: "server", Namespace: "ns-b", ServiceAccount: "server",
		TrustDomain: "cluster.local", Cluster: "c2", Network: "net1", Ready: true, HBONE: true,
		IPs: []netip.Addr{netip.MustParseAddr("10.200.2.2"), netip.MustParseAddr("fd00:200:2::2")}})
	// The service exists in both clusters, its endpoint only in c2.
	m.UpsertService("c1", model.Service{Namespace: "ns-b", Name: "web",
		VIPs:  []model.NetworkAddr{{Network: "net1", Addr: netip.MustParseAddr(testVIP)}},
		Ports: []model.Port{{Name: "http", Port: 80, TargetPort: 8080}}})
	m.UpsertService("c2", model.Service{Namespace: "ns-b", Name: "web",
		VIPs:      []model.NetworkAddr{{Network: "net1", Addr: netip.MustParseAddr("10.97.0.20")}},
		Ports:     []model.Port{{Name: "http", Port: 80, TargetPort: 8080}},
		Endpoints: []model.Endpoint{{WorkloadUID: "c2//Pod/ns-b/server", Ready: true}}})
	m.MarkSynced()

	c, err := meshca.NewTest("model-integration")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e.ctx = ctx
	start := func(agent *fakeAgent) *Proxy {
		p, err := New(WithWorkloadEvents(agent), WithFetcher(certs.FromCA(c, time.Hour, time.Now)),
			WithAddresses("", "", ""), WithMeshCIDRs(netip.MustParsePrefix(testMeshNet)),
			func(o *options) { o.model = m })
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return p
	}
	agentA, agentB := &fakeAgent{sessions: make(chan chan evReq)}, &fakeAgent{sessions: make(chan chan evReq)}
	e.proxyA, e.proxyB = start(agentA), start(agentB)
	e.sessionA, e.sessionB = make(chan evReq), make(chan evReq)
	agentA.sessions <- e.sessionA
	agentB.sessions <- e.sessionB
	if err := send(t, e.sessionA, WorkloadEvent{Kind: EventAdd, UID: "a", Name: "client", Namespace: "ns-a", ServiceAccount: "client", Netns: openNetns(t, e.podA)}); err != nil {
		t.Fatal(err)
	}
	if err := send(t, e.sessionB, WorkloadEvent{Kind: EventAdd, UID: "b", Name: "server", Namespace: "ns-b", ServiceAccount: serverSA, Netns: openNetns(t, e.podB)}); err != nil {
		t.Fatal(err)
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

// try connects from pod A to addr, sends a message and returns what came
// back, or the error: a refused tunnel is a reset after the connect.
func (e *modelNodes) try(addr string) (string, error) {
	n, err := podnet.Open("/var/run/netns/" + e.podA)
	if err != nil {
		e.t.Fatal(err)
	}
	defer n.Close()
	dctx, dcancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer dcancel()
	conn, err := n.DialContext(dctx, &net.Dialer{}, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, "via the model")
	_ = conn.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(conn)
	return string(got), err
}

// TestIntegrationServiceVIPOverHBONE: pod A connects to a Service VIP that
// exists only in the model (no route, no kube-proxy); proxy A picks the
// service's endpoint in the other cluster, maps port 80 to 8080 and
// tunnels to pod B over HBONE, requiring pod B's identity. A mesh address
// the model does not know is refused, not sent with "any identity".
func TestIntegrationServiceVIPOverHBONE(t *testing.T) {
	e := newModelNodes(t, "server")
	if got, err := e.try(testVIP + ":80"); err != nil || got != "10.200.1.2\nvia the model" {
		t.Fatalf("pod a → VIP %s:80: %q, %v", testVIP, got, err)
	}
	if n := metricValue(t, e.proxyA, "meshctl_hbone_connections_opened_total", "outbound"); n != 1 {
		t.Errorf("proxy A outbound tunnels = %v, want 1", n)
	}
	if n := metricValue(t, e.proxyA, "meshctl_hbone_connections_opened_total", "outbound_passthrough"); n != 0 {
		t.Errorf("proxy A passthrough = %v, want 0: the VIP must not go in plaintext", n)
	}
	if n := metricValue(t, e.proxyB, "meshctl_hbone_connections_opened_total", "inbound"); n != 1 {
		t.Errorf("proxy B inbound tunnels = %v, want 1", n)
	}
	// The pod address resolves through the model too.
	if got, err := e.try("10.200.2.2:8080"); err != nil || got != "10.200.1.2\nvia the model" {
		t.Fatalf("pod a → pod b: %q, %v", got, err)
	}
	if n := metricValue(t, e.proxyA, "meshctl_hbone_connections_opened_total", "outbound"); n != 2 {
		t.Errorf("proxy A outbound tunnels = %v, want 2", n)
	}

	// Fail closed: in the mesh CIDR, unknown to the model.
	if got, err := e.try("10.200.2.99:8080"); err == nil && got != "" {
		t.Errorf("unknown mesh address answered %q", got)
	}
	if n := labelledValue(t, e.proxyA, "meshctl_proxy_outbound_refused_total", map[string]string{"reason": "unknown_destination"}); n != 1 {
		t.Errorf("refused unknown mesh destinations = %v, want 1", n)
	}
	// A VIP port the service does not have.
	if got, _ := e.try(testVIP + ":81"); got != "" {
		t.Errorf("unknown service port answered %q", got)
	}
	if n := labelledValue(t, e.proxyA, "meshctl_proxy_outbound_refused_total", map[string]string{"reason": "unknown_service_port"}); n != 1 {
		t.Errorf("refused unknown service ports = %v, want 1", n)
	}

	// config_dump shows the model.
	d := e.proxyA.Dump()
	if len(d.Workloads) != 2 || len(d.Services) != 1 || len(d.Services[0].VIPs) != 2 || len(d.Services[0].Endpoints) != 1 {
		t.Errorf("config_dump model: %+v %+v", d.Workloads, d.Services)
	}
}

// TestIntegrationSecureNaming: pod B's proxy presents
// spiffe://cluster.local/ns-b/sa/attacker while the model says the pod is
// ns-b/server. Proxy A must refuse the tunnel (by VIP and by pod address)
// and count it; without secure naming the attacker got the connection.
func TestIntegrationSecureNaming(t *testing.T) {
	e := newModelNodes(t, "attacker")
	for _, dst := range []string{testVIP + ":80", "10.200.2.2:8080"} {
		if got, err := e.try(dst); got != "" {
			t.Errorf("pod a → %s reached a server with the wrong identity: %q, %v", dst, got, err)
		}
	}
	if n := labelledValue(t, e.proxyA, "meshctl_hbone_handshake_failures_total", map[string]string{"reason": "peer_identity"}); n != 2 {
		t.Errorf("secure-naming refusals = %v, want 2", n)
	}
	if n := metricValue(t, e.proxyB, "meshctl_hbone_connections_opened_total", "inbound"); n != 0 {
		t.Errorf("proxy B inbound tunnels = %v, want 0", n)
	}
}
