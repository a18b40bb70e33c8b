package proxy

import (
	"net/netip"
	"testing"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
)

// TestDestinationLabelsFromTheModel: policies select workloads by labels,
// which ZDS does not carry; with a model the destination has the pod's
// labels (a finished pod that held the address loses to the ready one),
// without one only its namespace.
func TestDestinationLabelsFromTheModel(t *testing.T) {
	m := model.New("c1", "net1")
	addr := netip.MustParseAddr("10.200.2.2")
	m.UpsertWorkload(model.Workload{UID: "c1//Pod/ns-b/old", Name: "old", Namespace: "ns-b", Cluster: "c1", Network: "net1",
		IPs: []netip.Addr{addr}, Labels: map[string]string{"app": "old"}})
	m.UpsertWorkload(model.Workload{UID: "c1//Pod/ns-b/server", Name: "server", Namespace: "ns-b", Cluster: "c1", Network: "net1",
		Ready: true, IPs: []netip.Addr{addr}, Labels: map[string]string{"app": "server"}})
	w := &workload{namespace: "ns-b", addrs: []netip.Addr{addr}}
	p := &Proxy{model: m, opts: defaults(), workloads: map[string]*workload{"b": w}}
	if got := p.destination(w, addr); got.Namespace != "ns-b" || got.Labels["app"] != "server" {
		t.Fatalf("destination %+v, want ns-b with the ready pod's labels", got)
	}
	p.model = nil
	if got := p.destination(w, addr); got.Namespace != "ns-b" || got.Labels != nil {
		t.Fatalf("destination without a model %+v, want ns-b and no labels", got)
	}
}
