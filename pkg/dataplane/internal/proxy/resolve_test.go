package proxy

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
)

// TestResolveWaitsForTheModelToLearnAnAddress: a connection to a mesh
// address the model learns a moment later (a pod that just started) goes
// over HBONE with the pod's identity instead of being refused; one the
// model never learns is refused once learnWait is over.
func TestResolveWaitsForTheModelToLearnAnAddress(t *testing.T) {
	m := model.New("c1", "net1")
	m.MarkSynced()
	p := &Proxy{model: m, opts: defaults()}
	p.opts.meshCIDRs = []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16")}
	p.opts.learnWait = 10 * time.Second
	dst := netip.MustParseAddrPort("10.200.2.2:8080")
	go func() {
		time.Sleep(200 * time.Millisecond)
		m.UpsertWorkload(model.Workload{UID: "c1//Pod/ns-b/server", Name: "server", Namespace: "ns-b", ServiceAccount: "server",
			TrustDomain: "cluster.local", Cluster: "c1", Network: "net1", Ready: true, HBONE: true,
			IPs: []netip.Addr{dst.Addr()}})
	}()
	r := p.resolve(context.Background(), dst)
	if r.refuse != "" || !r.hbone || r.peer.String() != "spiffe://cluster.local/ns/ns-b/sa/server" {
		t.Fatalf("route %+v, want HBONE to ns-b/server once the model learned it", r)
	}

	p.opts.learnWait = 100 * time.Millisecond
	if r := p.resolve(context.Background(), netip.MustParseAddrPort("10.200.3.3:80")); r.refuse != "unknown_destination" {
		t.Fatalf("route %+v, want unknown_destination refused", r)
	}
	// Outside the mesh there is nothing to wait for.
	if r := p.resolve(context.Background(), netip.MustParseAddrPort("192.0.2.1:80")); r.refuse != "" || r.hbone {
		t.Fatalf("route %+v, want passthrough", r)
	}
}
