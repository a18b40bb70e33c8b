package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/hbone"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// fakeAgent is a node agent the test drives: each session is a channel of
// events; closing it ends the session as an agent restart would.
type fakeAgent struct{ sessions chan chan evReq }

type evReq struct {
	ev    WorkloadEvent
	reply chan error
}

func (f *fakeAgent) Run(ctx context.Context, handle func(WorkloadEvent) error) error {
	var s chan evReq
	select {
	case s = <-f.sessions:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		select {
		case r, ok := <-s:
			if !ok {
				return errors.New("agent went away")
			}
			r.reply <- handle(r.ev)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func send(t *testing.T, s chan evReq, ev WorkloadEvent) error {
	t.Helper()
	r := evReq{ev: ev, reply: make(chan error, 1)}
	select {
	case s <- r:
	case <-time.After(10 * time.Second):
		t.Fatal("proxy did not take the event")
	}
	return <-r.reply
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	var lastErr error
	for i := 0; i < 100; i++ {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		lastErr = err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("GET %s: %v", url, lastErr)
	return 0, ""
}

func echoServer(t *testing.T) netip.AddrPort {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

func TestProxyLifecycleAdminAndHBONE(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("proxy")
	if err != nil {
		t.Fatal(err)
	}
	agent := &fakeAgent{sessions: make(chan chan evReq)}
	admin, metrics, ready := freeAddr(t), freeAddr(t), freeAddr(t)
	p, err := New(
		WithWorkloadEvents(agent),
		WithFetcher(certs.FromCA(c, time.Hour, time.Now)),
		WithAddresses(admin, metrics, ready),
		withPorts(0, 0, 0),
		withMark(0),
		withHBONEOptions(hbone.WithAllowLoopback(true)),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if code, _ := get(t, "http://"+ready+"/healthz/ready"); code != 503 {
		t.Errorf("ready before the snapshot: %d, want 503", code)
	}
	s1 := make(chan evReq)
	agent.sessions <- s1
	for _, uid := range []string{"uid-a", "uid-b"} {
		if err := send(t, s1, WorkloadEvent{Kind: EventAdd, UID: uid, Name: "pod-" + uid, Namespace: "default", ServiceAccount: "sa-" + uid}); err != nil {
			t.Fatal(err)
		}
	}
	if err := send(t, s1, WorkloadEvent{Kind: EventAdd, UID: "bad"}); err == nil {
		t.Error("an Add without namespace/service account was acked")
	}
	if err := send(t, s1, WorkloadEvent{Kind: EventSnapshotSent}); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, "http://"+ready+"/healthz/ready"); code != 200 {
		t.Errorf("ready after the snapshot: %d, want 200", code)
	}

	// config_dump lists both workloads and, soon, Available certificates.
	var dump configDump
	for i := 0; i < 200; i++ {
		_, body := get(t, "http://"+admin+"/config_dump")
		dump = configDump{}
		if err := json.Unmarshal([]byte(body), &dump); err != nil {
			t.Fatalf("config_dump is not JSON: %v\n%s", err, body)
		}
		if len(dump.Certificates) == 2 && dump.Certificates[0].State == "Available" && dump.Certificates[1].State == "Available" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(dump.WorkloadState) != 2 || len(dump.Certificates) != 2 {
		t.Fatalf("config_dump: %d workloads, %d certificates", len(dump.WorkloadState), len(dump.Certificates))
	}
	for _, cd := range dump.Certificates {
		if cd.State != "Available" || len(cd.CertChain) != 2 || len(cd.RootCerts) != 1 {
			t.Errorf("certificate %s: state %q, %d chain, %d roots", cd.Identity, cd.State, len(cd.CertChain), len(cd.RootCerts))
		}
	}
	wa := dump.WorkloadState["uid-a"]
	if wa.UID != "uid-a" || wa.Identity != "spiffe://cluster.local/ns/default/sa/sa-uid-a" || len(wa.Listeners) != 3 {
		t.Fatalf("workload a: %+v", wa)
	}

	// A tunnel through pod a's 15008 presents pod a's identity.
	hboneAddr := netip.MustParseAddrPort(strings.Replace(wa.Listeners[2], "[::]", "127.0.0.1", 1))
	echo := echoServer(t)
	client := identity.New("cluster.local", "other", "client")
	cliCert, err := c.Issue(client.URL(), time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	d, err := hbone.NewDialer(
		hbone.WithRoots(func() *x509.CertPool { return c.RootPool() }),
		hbone.WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return &cliCert, nil }),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := d.Dial(tctx, hbone.Target{Source: client, Gateway: hboneAddr, Destination: echo,
		Peer: identity.New("cluster.local", "default", "sa-uid-a")})
	tcancel()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "hello")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo through the proxy: %q, %v", buf, err)
	}
	conn.Close()
	_, body := get(t, "http://"+metrics+"/metrics")
	if !strings.Contains(body, `meshctl_hbone_connections_opened_total{direction="inbound"} 1`) ||
		!strings.Contains(body, "meshctl_proxy_workloads 2") {
		t.Errorf("metrics do not show the tunnel and workloads:\n%s", grepLines(body, "meshctl_"))
	}

	// The agent restarts: the new snapshot re-adds a, omits b, and keeps
	// an unknown uid (acked, as ztunnel does: nothing to keep). b is
	// removed, a keeps its listeners.
	close(s1)
	s2 := make(chan evReq)
	agent.sessions <- s2
	if err := send(t, s2, WorkloadEvent{Kind: EventAdd, UID: "uid-a", Name: "pod-uid-a", Namespace: "default", ServiceAccount: "sa-uid-a"}); err != nil {
		t.Fatal(err)
	}
	if err := send(t, s2, WorkloadEvent{Kind: EventKeep, UID: "uid-zzz"}); err != nil {
		t.Errorf("Keep of an unknown workload refused: %v", err)
	}
	if err := send(t, s2, WorkloadEvent{Kind: EventSnapshotSent}); err != nil {
		t.Fatal(err)
	}
	dump = p.Dump()
	if len(dump.WorkloadState) != 1 || dump.WorkloadState["uid-a"].UID != "uid-a" || dump.WorkloadState["uid-a"].Listeners[2] != wa.Listeners[2] {
		t.Fatalf("after reconcile: %+v", dump.WorkloadState)
	}
	if len(dump.Certificates) != 1 {
		t.Errorf("certificates after b left: %d, want 1", len(dump.Certificates))
	}
	// Del closes a's listeners.
	if err := send(t, s2, WorkloadEvent{Kind: EventDel, UID: "uid-a"}); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", hboneAddr.String(), time.Second); err == nil {
		c.Close()
		t.Error("15008 still accepts after DelWorkload")
	}
	if n := len(p.Dump().WorkloadState); n != 0 {
		t.Errorf("%d workloads after Del", n)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return fmt.Sprint(strings.Join(out, "\n"))
}
