package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/hbone"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
	"github.com/meshctl/meshctl/pkg/meshca"
)

func TestNewGatewayNeedsItsPodAndAModel(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("gateway")
	if err != nil {
		t.Fatal(err)
	}
	f := WithFetcher(certs.FromCA(c, time.Hour, time.Now))
	withModel := func(o *options) { o.model = model.New("c2", "net2") }
	for _, tc := range []struct {
		cfg  GatewayConfig
		opts []Option
		want string
	}{
		{GatewayConfig{Namespace: "istio-system", PodName: "gw"}, []Option{f, withModel}, "service account"},
		{GatewayConfig{Namespace: "istio-system", ServiceAccount: "gw", PodName: "gw"}, []Option{f}, "WithDiscovery"},
		{GatewayConfig{Namespace: "istio-system", ServiceAccount: "gw", PodName: "gw"}, []Option{withModel}, "WithFetcher"},
	} {
		if _, err := newEastWest(tc.cfg, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
}

// TestGatewayOnLoopback runs the gateway mode in process, without network
// namespaces: a client's double-HBONE tunnel for the service reaches the
// endpoint's HBONE server through the gateway, which proves its own
// identity, becomes ready once it has it, and answers 503 for a service
// with no endpoint on its network. The endpoint listens on 127.0.0.73:15008
// (the gateway always forwards to an endpoint's 15008).
func TestGatewayOnLoopback(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("gateway")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := netip.MustParseAddr("127.0.0.73")
	epLn, err := net.Listen("tcp", netip.AddrPortFrom(endpoint, ambient.PortHBONE).String())
	if err != nil {
		t.Skipf("cannot listen on %s:15008 for the endpoint: %v", endpoint, err)
	}
	defer epLn.Close()
	m := model.New("c2", "net2")
	m.UpsertWorkload(model.Workload{UID: "c2//Pod/ns-b/server", Name: "server", Namespace: "ns-b", ServiceAccount: "server",
		TrustDomain: "cluster.local", Cluster: "c2", Network: "net2", Ready: true, HBONE: true, IPs: []netip.Addr{endpoint}})
	m.UpsertService("c2", model.Service{Namespace: "ns-b", Name: "web", Hostname: "web.ns-b.svc.cluster.local",
		Ports:     []model.Port{{Port: 80, TargetPort: 8080}},
		Endpoints: []model.Endpoint{{WorkloadUID: "c2//Pod/ns-b/server", Ready: true}}})
	m.MarkSynced()

	roots := c.RootPool
	serverID := identity.New("cluster.local", "ns-b", "server")
	serverCert, err := c.Issue(serverID.URL(), time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	app, err := net.Listen("tcp", netip.AddrPortFrom(endpoint, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	go func() {
		for {
			conn, err := app.Accept()
			if err != nil {
				return
			}
			go func() { defer conn.Close(); _, _ = io.Copy(conn, conn) }()
		}
	}()
	appPort := uint16(app.Addr().(*net.TCPAddr).Port)
	srv, err := hbone.NewServer(hbone.WithRoots(roots), hbone.WithAllowLoopback(true),
		hbone.WithServerCertificates(func(context.Context, netip.Addr) (*tls.Certificate, error) { return &serverCert, nil }),
		hbone.WithHostAuthority(func(host string, port uint16, dst netip.Addr) (netip.AddrPort, bool) {
			return netip.AddrPortFrom(dst, appPort), host == "web.ns-b.svc.cluster.local" && port == 80
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Serve(ctx, epLn) }()

	gwLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, err := newEastWest(GatewayConfig{Namespace: "istio-system", ServiceAccount: "istio-eastwestgateway", PodName: "gw", PodUID: "uid"},
		WithFetcher(certs.FromCA(c, time.Hour, time.Now)), WithAddresses("", "", ""),
		func(o *options) { o.model, o.gatewayListener = m, gwLn })
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	defer func() { cancel(); <-done }()

	clientID := identity.New("cluster.local", "ns-a", "client")
	clientCert, err := c.Issue(clientID.URL(), time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	d, err := hbone.NewDialer(hbone.WithRoots(roots),
		hbone.WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return &clientCert, nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// call sends a message through a tunnel for authority and returns the
	// echo, or the tunnel's error.
	call := func(authority string) (string, error) {
		a, b := net.Pipe()
		defer a.Close()
		res := make(chan error, 1)
		go func() {
			res <- d.Proxy(ctx, hbone.Target{Source: clientID, Gateway: addrPort(gwLn.Addr()), Peer: g.Identity(),
				Double: &hbone.Double{Authority: authority, Peers: []identity.Identity{serverID}}}, b)
		}()
		echoed := make(chan string, 1)
		go func() {
			msg := "through the gateway"
			if _, err := io.WriteString(a, msg); err != nil {
				return
			}
			buf := make([]byte, len(msg))
			if _, err := io.ReadFull(a, buf); err == nil {
				echoed <- string(buf)
			}
		}()
		select {
		case got := <-echoed:
			return got, nil
		case err := <-res:
			return "", err
		}
	}
	if got, err := call("web.ns-b.svc.cluster.local:80"); err != nil || got != "through the gateway" {
		t.Fatalf("through the gateway: %q, %v", got, err)
	}
	if !g.Ready() {
		t.Error("the gateway served with its certificate but is not ready")
	}
	if _, err := call("nope.ns-b.svc.cluster.local:80"); err == nil || !strings.Contains(err.Error(), http.StatusText(http.StatusServiceUnavailable)) {
		t.Errorf("unknown service: %v, want 503", err)
	}
	for result, want := range map[string]float64{"forwarded": 1, "no_endpoint": 1} {
		if n := registryValue(t, g.Registry(), "meshctl_gateway_tunnels_total", map[string]string{"result": result}); n != want {
			t.Errorf("gateway tunnels %s = %v, want %v", result, n, want)
		}
	}
}
