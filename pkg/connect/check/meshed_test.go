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
			judge(&p, testNS, testClient, testServer, tc.clientLog, tc.serverLog, nil)
			if p.Status != tc.wantStatus || p.Mesh == nil || p.Mesh.HBONE != tc.wantHBONE || p.Mesh.ServerIdentity != tc.wantServer || p.Mesh.ClientIdentity != tc.wantCl {
				t.Errorf("got %s %+v, want %s hbone=%v server=%q client=%q (error %q)", p.Status, p.Mesh, tc.wantStatus, tc.wantHBONE, tc.wantServer, tc.wantCl, p.Error)
			}
			if !strings.Contains(p.Error, tc.wantErr) || (tc.wantErr == "") != (p.Error == "") {
				t.Errorf("error %q, want one containing %q", p.Error, tc.wantErr)
			}
		})
	}
}

// Through the east-west gateway (a server on another network, by the
// client's own VIP of its Service): the client's proxy must have sent the
// tunnel to a gateway, requiring the server's identity, and the server's
// proxy must have received it from one of its network's gateway pods with
// the client's identity; a probe that went straight or in plaintext fails.
func TestJudgeGateway(t *testing.T) {
	t.Parallel()
	const gwPod, eastWest = "10.20.0.42", "172.18.255.201:15008"
	gateways := []netip.Addr{netip.MustParseAddr(gwPod)}
	// What the proxies log of a good double-HBONE call: the client's
	// names the gateway and the service's identities, the server's the
	// client's identity on a tunnel that came from the gateway pod.
	viaOut := func() connRecord {
		r := hboneOut(serviceVIP)
		r.Gateway = ap(eastWest)
		return r
	}
	viaIn := func() connRecord {
		r := hboneIn()
		r.Src = ap(gwPod + ":51000")
		return r
	}
	straight := hboneOut(serviceVIP) // HBONE, but to no gateway
	passthrough := hboneOut(serviceVIP)
	passthrough.Direction, passthrough.HBONE, passthrough.Peer = "outbound_passthrough", false, ""
	twoPeers := viaOut()
	twoPeers.Peer = "spiffe://cluster.local/ns/attacker/sa/attacker," + serverID
	plainIn := viaIn()
	plainIn.Direction, plainIn.HBONE, plainIn.Peer = "inbound_plaintext", false, ""
	denied := viaIn()
	denied.Error = "denied by policy meshctl-check/deny"
	otherID := viaIn()
	otherID.Peer = "spiffe://cluster.local/ns/default/sa/default"

	for _, tc := range []struct {
		name                 string
		clientLog, serverLog []connRecord
		gateways             []netip.Addr
		wantStatus           string
		wantHBONE            bool
		wantServer, wantCl   string
		wantGateway, wantErr string
	}{
		{name: "double hbone through the gateway", clientLog: []connRecord{viaOut()}, serverLog: []connRecord{viaIn()}, gateways: gateways,
			wantStatus: StatusOK, wantHBONE: true, wantServer: serverID, wantCl: clientID, wantGateway: eastWest},
		// Same-network judging would look for the client's own address.
		{name: "the server sees the gateway pod, not the client", clientLog: []connRecord{viaOut()}, serverLog: []connRecord{hboneIn()}, gateways: gateways,
			wantStatus: StatusFailed, wantServer: serverID, wantGateway: eastWest,
			wantErr: "the server's node proxy (node c2-worker) saw no connection from the client through its east-west gateway"},
		{name: "no gateway pod found", clientLog: []connRecord{viaOut()}, serverLog: []connRecord{viaIn()},
			wantStatus: StatusFailed, wantServer: serverID, wantGateway: eastWest, wantErr: "no gateway pod found in istio-system with app=istio-eastwestgateway"},
		{name: "through no gateway", clientLog: []connRecord{straight}, serverLog: []connRecord{viaIn()}, gateways: gateways,
			wantStatus: StatusFailed, wantHBONE: true, wantServer: serverID, wantCl: clientID,
			wantErr: "the client's node proxy (node c1-worker) tunnelled it through no east-west gateway"},
		{name: "plaintext out", clientLog: []connRecord{viaOut(), passthrough}, serverLog: []connRecord{viaIn()}, gateways: gateways,
			wantStatus: StatusFailed, wantCl: clientID, wantErr: "went in plaintext: outbound_passthrough on the client's node proxy (node c1-worker)"},
		{name: "plaintext in", clientLog: []connRecord{viaOut()}, serverLog: []connRecord{plainIn}, gateways: gateways,
			wantStatus: StatusFailed, wantServer: serverID, wantGateway: eastWest, wantErr: "went in plaintext: inbound_plaintext on the server's node proxy (node c2-worker)"},
		{name: "a foreign identity among the service's", clientLog: []connRecord{twoPeers}, serverLog: []connRecord{viaIn()}, gateways: gateways,
			wantStatus: StatusFailed, wantHBONE: true, wantServer: twoPeers.Peer, wantCl: clientID, wantGateway: eastWest, wantErr: "required identity " + twoPeers.Peer},
		{name: "refused by the server's policy", clientLog: []connRecord{viaOut()}, serverLog: []connRecord{denied}, gateways: gateways,
			wantStatus: StatusFailed, wantServer: serverID, wantGateway: eastWest, wantErr: "the server's proxy refused the tunnel: denied by policy meshctl-check/deny"},
		{name: "the server saw another identity", clientLog: []connRecord{viaOut()}, serverLog: []connRecord{otherID}, gateways: gateways,
			wantStatus: StatusFailed, wantHBONE: true, wantServer: serverID, wantCl: otherID.Peer, wantGateway: eastWest, wantErr: `saw identity "spiffe://cluster.local/ns/default/sa/default"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Probe{From: "c1", To: "c2", Path: PathGateway, Address: serviceVIP, Status: StatusOK}
			judge(&p, testNS, testClient, testServer, tc.clientLog, tc.serverLog, tc.gateways)
			m := p.Mesh
			if p.Status != tc.wantStatus || m == nil || m.HBONE != tc.wantHBONE || m.ServerIdentity != tc.wantServer || m.ClientIdentity != tc.wantCl || m.Gateway != tc.wantGateway {
				t.Errorf("got %s %+v, want %s hbone=%v server=%q client=%q gateway=%q (error %q)", p.Status, m, tc.wantStatus, tc.wantHBONE, tc.wantServer, tc.wantCl, tc.wantGateway, p.Error)
			}
			if !strings.Contains(p.Error, tc.wantErr) || (tc.wantErr == "") != (p.Error == "") {
				t.Errorf("error %q, want one containing %q", p.Error, tc.wantErr)
			}
		})
	}
}

// fakeReader serves connection logs by cluster and node, and gateway pod
// addresses by cluster, and counts reads.
type fakeReader struct {
	logs    map[string][]connRecord // "cluster/node"
	gws     map[string][]netip.Addr
	reads   int
	gwReads int
}

func (f *fakeReader) gateways(_ context.Context, r *run) ([]netip.Addr, error) {
	f.gwReads++
	g, ok := f.gws[r.plan.Name]
	if !ok {
		return nil, errors.New("forbidden")
	}
	return g, nil
}

func (f *fakeReader) connections(_ context.Context, r *run, node string) ([]connRecord, error) {
	f.reads++
	l, ok := f.logs[r.plan.Name+"/"+node]
	if !ok {
		return nil, errors.New("no meshctl-proxy pod")
	}
	return l, nil
}

// judgeAll reads each node proxy once and each server cluster's gateway
// pods once (for gateway probes only), skips the untested gateway entries,
// and names the cluster and node of a proxy it cannot read.
func TestJudgeAll(t *testing.T) {
	t.Parallel()
	c1 := &run{clientPod: testClient}
	c1.plan.Name = "c1"
	c2 := &run{server: testServer}
	c2.plan.Name = "c2"
	const otherVIP = "10.255.10.10"
	viaOut := hboneOut(otherVIP)
	viaOut.Gateway = ap("172.18.255.201:15008")
	viaIn := hboneIn()
	viaIn.Src = ap("10.20.0.42:51000")
	f := &fakeReader{logs: map[string][]connRecord{
		"c1/c1-worker": {hboneOut(serviceVIP), hboneOut(serverIP), viaOut},
		"c2/c2-worker": {hboneIn(), viaIn},
	}, gws: map[string][]netip.Addr{"c2": {netip.MustParseAddr("10.20.0.42")}}}
	c := New(nil)
	c.reader = f
	probes := []Probe{
		{From: "c1", To: "c2", Path: PathPod, Address: serverIP, Status: StatusOK},
		{From: "c1", To: "c2", Path: PathService, Address: serviceVIP, Status: StatusOK},
		{From: "c1", To: "c2", Path: PathGateway, Address: otherVIP, Status: StatusOK},
		{From: "c1", To: "c3", Path: PathGateway, Status: StatusViaGateway},
	}
	if err := c.judgeAll(context.Background(), []*run{c1, c2}, probes); err != nil {
		t.Fatal(err)
	}
	for _, p := range probes[:3] {
		if p.Status != StatusOK || p.Mesh == nil || !p.Mesh.HBONE {
			t.Errorf("%+v %+v", p, p.Mesh)
		}
	}
	if probes[3].Mesh != nil || f.reads != 2 || f.gwReads != 1 {
		t.Errorf("untested gateway entry %+v, %d reads (want 2), %d gateway reads (want 1)", probes[3], f.reads, f.gwReads)
	}
	delete(f.gws, "c2")
	err := c.judgeAll(context.Background(), []*run{c1, c2}, probes)
	if err == nil || !strings.Contains(err.Error(), `cluster "c2": east-west gateway: forbidden`) {
		t.Errorf("err = %v", err)
	}
	c2.server.node = "c2-control-plane"
	err = c.judgeAll(context.Background(), []*run{c1, c2}, probes[:2])
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
// cluster's Service; a cluster on another network by that VIP alone, as a
// tested gateway probe (its pod IPs are not routed from here).
func TestPlanMeshed(t *testing.T) {
	t.Parallel()
	c1 := &run{podIPs: []string{"10.10.0.5"}, svcByTo: map[string][]string{"c1": {"10.255.10.1"}, "c2": {"10.255.10.2"}, "c3": {"10.255.10.3", "fd00:10:255::3"}}}
	c1.plan.Name, c1.plan.Network = "c1", "n1"
	c2 := &run{podIPs: []string{"10.20.0.5"}, svcIPs: []string{"10.255.20.7"}}
	c2.plan.Name, c2.plan.Network = "c2", "n1"
	c3 := &run{podIPs: []string{"10.30.0.5"}}
	c3.plan.Name, c3.plan.Network = "c3", "n2"
	var got []string
	for _, p := range New(nil, WithMeshed(true)).plan(c1, []*run{c1, c2, c3}) {
		got = append(got, p.To+"/"+p.Path+"/"+p.Address+"/"+p.Status)
	}
	if want := "c1/pod/10.10.0.5/ c1/service/10.255.10.1/ c2/pod/10.20.0.5/ c2/service/10.255.10.2/ c3/gateway/10.255.10.3/ c3/gateway/fd00:10:255::3/"; strings.Join(got, " ") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
}
