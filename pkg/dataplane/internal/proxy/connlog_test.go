package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// The log keeps the newest connLogSize records, oldest first, and a
// record's outcome can be filled in after it was added.
func TestConnLogRing(t *testing.T) {
	t.Parallel()
	var l connLog
	if got := l.records(); len(got) != 0 {
		t.Fatalf("empty log: %v", got)
	}
	var fails []func(error)
	for i := range connLogSize + 3 {
		fails = append(fails, l.add(connRecord{Pod: fmt.Sprint(i)}))
	}
	fails[connLogSize+2](errors.New("reset"))
	fails[0](errors.New("overwritten: must not show"))
	fails[5](nil)
	got := l.records()
	if len(got) != connLogSize {
		t.Fatalf("%d records, want %d", len(got), connLogSize)
	}
	if got[0].Pod != "3" || got[len(got)-1].Pod != fmt.Sprint(connLogSize+2) {
		t.Errorf("oldest %s, newest %s", got[0].Pod, got[len(got)-1].Pod)
	}
	if got[len(got)-1].Error != "reset" || got[2].Error != "" || got[0].Time.IsZero() {
		t.Errorf("newest %+v, third %+v", got[len(got)-1], got[2])
	}
}

// TestIntegrationConnectionLog: on the two-node topology, pod A's call to
// pod B shows on both proxies' /debug/connections as HBONE, each side
// naming the other's identity; the router's plaintext shows on proxy B as
// inbound_plaintext, not HBONE.
func TestIntegrationConnectionLog(t *testing.T) {
	e := newTwoNodes(t)
	if got := e.talk(e.podA, "10.200.2.2:8080"); got != "10.200.1.2\nover hbone" {
		t.Fatalf("pod a → pod b: %q", got)
	}
	if got := e.talk(e.router, "10.200.2.2:8080"); got != "10.200.2.1\nover hbone" {
		t.Fatalf("router → pod b: %q", got)
	}
	idA, idB := "spiffe://cluster.local/ns/ns-a/sa/client", "spiffe://cluster.local/ns/ns-b/sa/server"
	dst := netip.MustParseAddrPort("10.200.2.2:8080")

	out := readConnections(t, e.proxyA)
	if len(out) != 1 {
		t.Fatalf("proxy A: %+v, want one record", out)
	}
	if r := out[0]; r.Direction != "outbound" || !r.HBONE || r.Pod != "ns-a/client" || r.Identity != idA ||
		r.Src.Addr() != netip.MustParseAddr("10.200.1.2") || r.Dst != dst || r.Peer != idB || r.Error != "" {
		t.Errorf("proxy A: %+v", r)
	}
	in := readConnections(t, e.proxyB)
	if len(in) != 2 {
		t.Fatalf("proxy B: %+v, want two records", in)
	}
	if r := in[0]; r.Direction != "inbound" || !r.HBONE || r.Pod != "ns-b/server" || r.Identity != idB ||
		r.Src.Addr() != netip.MustParseAddr("10.200.1.2") || r.Dst != dst || r.Peer != idA || r.Error != "" {
		t.Errorf("proxy B, pod a's call: %+v", r)
	}
	if r := in[1]; r.Direction != "inbound_plaintext" || r.HBONE || r.Src.Addr() != netip.MustParseAddr("10.200.2.1") || r.Peer != "" {
		t.Errorf("proxy B, the router's call: %+v", r)
	}
}

// readConnections reads /debug/connections from p's admin handler.
func readConnections(t *testing.T, p *Proxy) []connRecord {
	t.Helper()
	rec := httptest.NewRecorder()
	p.adminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/connections", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/debug/connections: %d %s", rec.Code, rec.Body)
	}
	var body struct {
		Connections []connRecord `json:"connections"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("/debug/connections: %v\n%s", err, rec.Body)
	}
	return body.Connections
}
