package model

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

// gatewaySvc is cluster's istio-system/istio-eastwestgateway, marked as
// network's gateway, with the given pods behind it.
func gatewaySvc(network string, lb []netip.Addr, eps ...Endpoint) Service {
	return Service{
		Namespace: "istio-system", Name: "istio-eastwestgateway",
		Hostname:   "istio-eastwestgateway.istio-system.svc.cluster.local",
		VIPs:       []NetworkAddr{{network, ip("10.97.0.99")}},
		Ports:      []Port{{Name: "tls", Port: 15443, TargetPort: 15443}, {Name: "tcp-hbone", Port: 15008, TargetPort: 15008}},
		Endpoints:  eps,
		GatewayFor: network, LoadBalancer: lb,
	}
}

func gatewayPod(cluster, network, name, ipAddr string) Workload {
	w := wl(cluster, network, name, ipAddr, true, false)
	w.Namespace, w.ServiceAccount, w.UID = "istio-system", "istio-eastwestgateway", cluster+"//Pod/istio-system/"+name
	return w
}

// TestNetworkGateway: a service whose only ready endpoints are on another
// network is reached through that network's gateway, known from its
// Service (network label, load-balancer address, port 15008, and its
// pods' one identity): double HBONE to the gateway's address, naming the
// service by host name and service port, the inner tunnel accepting the
// identities of the service's endpoints there. Without any of these the
// endpoint is refused as NoGateway, never sent directly.
func TestNetworkGateway(t *testing.T) {
	m := New("c1", "net1")
	m.UpsertWorkload(wl("c2", "net2", "far", "10.2.0.5", true, true))
	m.UpsertWorkload(wl("c2", "net2", "far2", "10.2.0.6", true, true))
	m.UpsertWorkload(wl("c2", "net2", "plain", "10.2.0.7", true, false))
	m.UpsertService("c1", svc("10.96.0.10", "net1"))
	m.UpsertService("c2", svc("10.97.0.20", "net2",
		ep("c2//Pod/ns/far", true, nil), ep("c2//Pod/ns/far2", true, nil), ep("c2//Pod/ns/plain", true, nil)))
	if _, r := m.Resolve(addr("10.96.0.10:80")); r != NoGateway {
		t.Fatalf("no gateway yet: %v, want %v", r, NoGateway)
	}

	lb := []netip.Addr{ip("172.18.200.1"), ip("fc00::c8:1")}
	gw := gatewayPod("c2", "net2", "gw-1", "10.2.0.100")
	m.UpsertWorkload(gw)
	steps := []struct {
		name string
		svc  Service
	}{
		{"no load-balancer address", gatewaySvc("net2", nil, ep(gw.UID, true, nil))},
		{"no ready pod", gatewaySvc("net2", lb, ep(gw.UID, false, nil))},
		{"another network's gateway", gatewaySvc("net3", lb, ep(gw.UID, true, nil))},
	}
	for _, st := range steps {
		m.UpsertService("c2", st.svc)
		if _, r := m.Resolve(addr("10.96.0.10:80")); r != NoGateway {
			t.Errorf("%s: %v, want %v", st.name, r, NoGateway)
		}
	}
	noHBONE := gatewaySvc("net2", lb, ep(gw.UID, true, nil))
	noHBONE.Ports = noHBONE.Ports[:1]
	m.UpsertService("c2", noHBONE)
	if _, r := m.Resolve(addr("10.96.0.10:80")); r != NoGateway {
		t.Errorf("gateway without port 15008: %v, want %v", r, NoGateway)
	}

	m.UpsertService("c2", gatewaySvc("net2", lb, ep(gw.UID, true, nil)))
	want := []identity.Identity{identity.New("cluster.local", "ns", "sa-far"), identity.New("cluster.local", "ns", "sa-far2")}
	for range 50 {
		up, r := m.Resolve(addr("10.96.0.10:80"))
		if r != Found {
			t.Fatalf("with a gateway: %v", r)
		}
		if up.Gateway != addr("172.18.200.1:15008") || up.GatewayIdentity != identity.New("cluster.local", "istio-system", "istio-eastwestgateway") ||
			up.GatewayNetwork != "net2" || up.Hostname != "web.ns.svc.cluster.local" || up.ServicePort != 80 || !up.HBONE {
			t.Fatalf("route: %+v", up)
		}
		ids := slices.Clone(up.Identities)
		slices.SortFunc(ids, func(a, b identity.Identity) int { return cmpString(a.String(), b.String()) })
		if !slices.Equal(ids, want) {
			t.Fatalf("inner identities %v, want %v (the plain pod cannot be reached across networks)", ids, want)
		}
	}
	m.UpsertService("c1", Service{Namespace: "ns", Name: "web", Hostname: "web.ns.svc.cluster.local",
		VIPs: []NetworkAddr{{"net1", ip("fd00:96::10")}}, Ports: []Port{{Port: 80, TargetPort: 8080}}})
	if up, _ := m.Resolve(addr("[fd00:96::10]:80")); up.Gateway != addr("[fc00::c8:1]:15008") {
		t.Errorf("v6 destination went to gateway %v, want its v6 address", up.Gateway)
	}

	// Gateway pods that disagree on their identity leave nothing to require.
	other := gatewayPod("c2", "net2", "gw-2", "10.2.0.101")
	other.ServiceAccount = "impostor"
	m.UpsertWorkload(other)
	m.UpsertService("c2", gatewaySvc("net2", lb, ep(gw.UID, true, nil), ep(other.UID, true, nil)))
	if _, r := m.Resolve(addr("[fd00:96::10]:80")); r != NoGateway {
		t.Errorf("gateway pods with two identities: %v, want %v", r, NoGateway)
	}
}

// TestGatewayAndInboundTargets: as the gateway of net2, the model forwards
// a service's tunnels to a ready meshed endpoint on its own network at
// 15008; a node proxy maps a host-named inbound tunnel to the target port
// of the endpoint at the connection's destination.
func TestGatewayAndInboundTargets(t *testing.T) {
	m := New("c2", "net2")
	m.UpsertWorkload(wl("c1", "net1", "near", "10.1.0.5", true, true))
	m.UpsertWorkload(wl("c2", "net2", "far", "10.2.0.5", true, true))
	m.UpsertWorkload(wl("c2", "net2", "plain", "10.2.0.7", true, false))
	m.UpsertWorkload(wl("c2", "net2", "down", "10.2.0.8", false, true))
	m.UpsertService("c1", svc("10.96.0.10", "net1", ep("c1//Pod/ns/near", true, nil)))
	m.UpsertService("c2", svc("10.97.0.20", "net2", ep("c2//Pod/ns/far", true, map[uint16]uint16{90: 9091}),
		ep("c2//Pod/ns/plain", true, nil), ep("c2//Pod/ns/down", true, nil)))
	for range 50 {
		if got, ok := m.GatewayTarget("web.ns.svc.cluster.local", 80); !ok || got != addr("10.2.0.5:15008") {
			t.Fatalf("gateway target %v %v, want only the ready meshed endpoint on net2", got, ok)
		}
	}
	if _, ok := m.GatewayTarget("web.ns.svc.cluster.local", 81); ok {
		t.Error("gateway target for a port the service lacks")
	}
	if _, ok := m.GatewayTarget("nope.ns.svc.cluster.local", 80); ok {
		t.Error("gateway target for an unknown host")
	}

	cases := []struct {
		port uint16
		dst  string
		want string
	}{
		{80, "10.2.0.5", "10.2.0.5:8080"},
		{90, "10.2.0.5", "10.2.0.5:9091"}, // named target port, resolved per pod
		{81, "10.2.0.5", ""},              // not a port of the service
		{80, "10.2.0.9", ""},              // no workload there
		{80, "10.1.0.5", ""},              // another network's address
	}
	for _, c := range cases {
		got, ok := m.InboundTarget("web.ns.svc.cluster.local", c.port, ip(c.dst))
		if (c.want == "") == ok || (ok && got != addr(c.want)) {
			t.Errorf("inbound web:%d at %s: %v %v, want %q", c.port, c.dst, got, ok, c.want)
		}
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
