package check

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

const (
	testNS     = "meshctl-check"
	serverID   = "spiffe://cluster.local/ns/meshctl-check/sa/meshctl-check-server"
	clientID   = "spiffe://cluster.local/ns/meshctl-check/sa/meshctl-check-client"
	clientIP   = "10.10.0.7"
	serverIP   = "10.20.0.5"
	serviceVIP = "10.255.10.9"
)

var (
	testClient = endpoint{pod: testNS + "/client", node: "c1-worker", ips: []netip.Addr{netip.MustParseAddr(clientIP), netip.MustParseAddr("fd00:10::7")}}
	testServer = endpoint{pod: testNS + "/server", node: "c2-worker", ips: []netip.Addr{netip.MustParseAddr(serverIP)}}
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// hboneOut and hboneIn are what the proxies log of a good call to dst.
func hboneOut(dst string) connRecord {
	return connRecord{Direction: "outbound", HBONE: true, Pod: testClient.pod, Src: ap(clientIP + ":40000"), Dst: ap(dst + ":8080"), Peer: serverID}
}

func hboneIn() connRecord {
	return connRecord{Direction: "inbound", HBONE: true, Pod: testServer.pod, Src: ap(clientIP + ":40000"), Dst: ap(serverIP + ":8080"), Peer: clientID}
}

// TestJudge: a probe passes only when the client's proxy tunnelled it and
// the server's proxy received it over HBONE, each with the check's
// identities; plaintext on either side, a missing record (the call
// bypassed the proxy) or a foreign identity fails it.
func TestJudge(t *testing.T) {
	t.Parallel()
	passthrough := hboneOut(serviceVIP)
	passthrough.Direction, passthrough.HBONE, passthrough.Peer = "outbound_passthrough", false, ""
	plainIn := hboneIn()
	plainIn.Direction, plainIn.HBONE, plainIn.Peer = "inbound_plaintext", false, ""
	failedOut := hboneOut(serviceVIP)
	failedOut.Error = "hbone: peer identity mismatch"
	denied := hboneIn()
	denied.Error = "denied by policy meshctl-check/deny"
	otherPod := hboneOut(serviceVIP)
	otherPod.Pod = "default/other"
	otherSrc := hboneIn()
	otherSrc.Src = ap("10.10.0.99:1234")
	wrongPeer := hboneOut(serviceVIP)
	wrongPeer.Peer = "spiffe://cluster.local/ns/attacker/sa/attacker"
	anyPeer := hboneOut(serviceVIP)
	anyPeer.Peer = ""
	v6In := hboneIn()
	v6In.Src = ap("[fd00:10::7]:40000")

	for _, tc := range []struct {
		name               string
		status             string // the probe's outcome from nc
		clientLog          []connRecord
		serverLog          []connRecord
		wantStatus         string
		wantHBONE          bool
		wantServer, wantCl string
		wantErr            string
	}{
		{name: "hbone both ways", status: StatusOK, clientLog: []connRecord{hboneOut(serviceVIP)}, serverLog: []connRecord{hboneIn()},
			wantStatus: StatusOK, wantHBONE: true, wantServer: serverID, wantCl: clientID},
		{name: "a failed retry then a good one", status: StatusOK, clientLog: []connRecord{failedOut, hboneOut(serviceVIP)}, serverLog: []connRecord{hboneIn()},
			wantStatus: StatusOK, wantHBONE: true, wantServer: serverID, wantCl: clientID},
		{name: "client over IPv6 address", status: StatusOK, clientLog: []connRecord{hboneOut(serviceVIP)}, serverLog: []connRecord{v6In},
			wantStatus: StatusOK, wantHBONE: true, wantServer: serverID, wantCl: clientID},
		{name: "passthrough on the client's proxy", status: StatusOK, clientLog: []connRecord{hboneOut(serviceVIP), passthrough}, serverLog: []connRecord{hboneIn()},
			wantStatus: StatusFailed, wantCl: clientID, wantErr: "went in plaintext: outbound_passthrough on the client's node proxy (node c1-worker)"},
		{name: "plaintext into the server", status: StatusOK, clientLog: []connRecord{hboneOut(serviceVIP)}, serverLog: []connRecord{plainIn},
			wantStatus: StatusFailed, wantServer: serverID, wantErr: "went in plaintext: inbound_plaintext on the server's node proxy (node c2-worker)"},
		{name: "nothing on the client's proxy", status: StatusOK, clientLog: []connRecord{otherPod}, serverLog: []connRecord{hboneIn()},
			wantStatus: StatusFailed, wantCl: clientID, wantErr: "saw no connection to 10.255.10.9: the call bypassed the mesh"},
		{name: "nothing from this client on the server's proxy", status: StatusOK, clientLog: []connRecord{hboneOut(serviceVIP)}, serverLog: []connRecord{otherSrc},
			wantStatus: StatusFailed, wantServer: serverID, wantErr: "the server's node proxy (node c2-worker) saw no connection from the client"},
		{name: "wrong server identity required", status: StatusOK, clientLog: []connRecord{wrongPeer}, serverLog: []connRecord{hboneIn()},
			wantStatus: StatusFailed, wantHBONE: true, wantServer: wrongPeer.Peer, wantCl: clientID, wantErr: "required identity spiffe://cluster.local/ns/attacker/sa/attacker"},
		{name: "any identity accepted is shown, not failed", status: StatusOK, clientLog: []connRecord{anyPeer}, serverLog: []connRecord{hboneIn()},
			wantStatus: StatusOK, wantHBONE: true, wantCl: clientID},
		{name: "denied by policy", status: StatusFailed, clientLog: []connRecord{failedOut}, serverLog: []connRecord{denied},
			wantStatus: StatusFailed, wantErr: "nc said no; the client's tunnel failed: hbone: peer identity mismatch; the server's proxy refused the tunnel: denied by policy meshctl-check/deny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Probe{From: "c1", To: "c2", Path: PathService, Address: serviceVIP, Status: tc.status}
			if tc.status == StatusFailed {
				p.Error = "nc said no"
			}
			judge(&p, testNS, testClient, testServer, tc.clientLog, tc.serverLog)
			if p.Status != tc.wantStatus || p.Mesh == nil || p.Mesh.HBONE != tc.wantHBONE || p.Mesh.ServerIdentity != tc.wantServer || p.Mesh.ClientIdentity != tc.wantCl {
				t.Errorf("got %s %+v, want %s hbone=%v server=%q client=%q (error %q)", p.Status, p.Mesh, tc.wantStatus, tc.wantHBONE, tc.wantServer, tc.wantCl, p.Error)
			}
			if !strings.Contains(p.Error, tc.wantErr) || (tc.wantErr == "") != (p.Error == "") {
				t.Errorf("error %q, want one containing %q", p.Error, tc.wantErr)
			}
		})
	}
}

// fakeReader serves connection logs by cluster and node, and counts reads.
type fakeReader struct {
	logs  map[string][]connRecord // "cluster/node"
	reads int
}

func (f *fakeReader) connections(_ context.Context, r *run, node string) ([]connRecord, error) {
	f.reads++
	l, ok := f.logs[r.plan.Name+"/"+node]
	if !ok {
		return nil, errors.New("no meshctl-proxy pod")
	}
	return l, nil
}

// judgeAll reads each node proxy once, skips gateway probes, and names the
// cluster and node of a proxy it cannot read.
func TestJudgeAll(t *testing.T) {
	t.Parallel()
	c1 := &run{clientPod: testClient}
	c1.plan.Name = "c1"
	c2 := &run{server: testServer}
	c2.plan.Name = "c2"
	f := &fakeReader{logs: map[string][]connRecord{
		"c1/c1-worker": {hboneOut(serviceVIP), hboneOut(serverIP)},
		"c2/c2-worker": {hboneIn()},
	}}
	c := New(nil)
	c.reader = f
	probes := []Probe{
		{From: "c1", To: "c2", Path: PathPod, Address: serverIP, Status: StatusOK},
		{From: "c1", To: "c2", Path: PathService, Address: serviceVIP, Status: StatusOK},
		{From: "c1", To: "c3", Path: PathGateway, Status: StatusViaGateway},
	}
	if err := c.judgeAll(context.Background(), []*run{c1, c2}, probes); err != nil {
		t.Fatal(err)
	}
	for _, p := range probes[:2] {
		if p.Status != StatusOK || p.Mesh == nil || !p.Mesh.HBONE {
			t.Errorf("%+v", p)
		}
	}
	if probes[2].Mesh != nil || f.reads != 2 {
		t.Errorf("gateway probe %+v, %d reads (want 2)", probes[2], f.reads)
	}
	c2.server.node = "c2-control-plane"
	err := c.judgeAll(context.Background(), []*run{c1, c2}, probes)
	if err == nil || !strings.Contains(err.Error(), `cluster "c2": node proxy on c2-control-plane: no meshctl-proxy pod`) {
		t.Errorf("err = %v", err)
	}
}

func TestClientIPs(t *testing.T) {
	t.Parallel()
	got := clientIPs("CLIENT_IPS 10.10.0.7,fd00:10::7\nRESULT 0 ok\n")
	if len(got) != 2 || got[0] != netip.MustParseAddr("10.10.0.7") || got[1] != netip.MustParseAddr("fd00:10::7") {
		t.Errorf("%v", got)
	}
	// With the node's addresses: a tunnel to another cluster arrives from
	// the client's node (masqueraded).
	if got := clientIPs("CLIENT_IPS 10.10.0.7,172.18.0.3\nRESULT 0 ok\n"); len(got) != 2 || got[1] != netip.MustParseAddr("172.18.0.3") {
		t.Errorf("with the node's address: %v", got)
	}
	if got := clientIPs("CLIENT_IPS ,\nRESULT 0 ok\n"); len(got) != 0 {
		t.Errorf("empty downward API values: %v", got)
	}
	if got := clientIPs("CLIENT_IPS\nRESULT 0 ok\n"); len(got) != 0 {
		t.Errorf("no addresses: %v", got)
	}
}

// In the meshed mode a client probes its own cluster's VIP of each
// cluster's Service.
func TestPlanMeshed(t *testing.T) {
	t.Parallel()
	c1 := &run{podIPs: []string{"10.10.0.5"}, svcByTo: map[string][]string{"c1": {"10.255.10.1"}, "c2": {"10.255.10.2"}}}
	c1.plan.Name, c1.plan.Network = "c1", "n1"
	c2 := &run{podIPs: []string{"10.20.0.5"}, svcIPs: []string{"10.255.20.7"}}
	c2.plan.Name, c2.plan.Network = "c2", "n1"
	var got []string
	for _, p := range New(nil, WithMeshed(true)).plan(c1, []*run{c1, c2}) {
		got = append(got, p.To+"/"+p.Path+"/"+p.Address)
	}
	if want := "c1/pod/10.10.0.5 c1/service/10.255.10.1 c2/pod/10.20.0.5 c2/service/10.255.10.2"; strings.Join(got, " ") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
}
