package model

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

var (
	ip   = netip.MustParseAddr
	addr = netip.MustParseAddrPort
)

func wl(cluster, network, name, ipAddr string, ready, hbone bool) Workload {
	return Workload{
		UID: cluster + "//Pod/ns/" + name, Name: name, Namespace: "ns", ServiceAccount: "sa-" + name,
		TrustDomain: "cluster.local", Cluster: cluster, Network: network, Node: "node-" + cluster,
		IPs: []netip.Addr{ip(ipAddr)}, Ready: ready, HBONE: hbone,
	}
}

// svc is cluster's view of ns/web: port 80 → 8080, port 90 → named "metrics".
func svc(vip, network string, eps ...Endpoint) Service {
	return Service{
		Namespace: "ns", Name: "web", Hostname: "web.ns.svc.cluster.local",
		VIPs:      []NetworkAddr{{network, ip(vip)}},
		Ports:     []Port{{Name: "http", Port: 80, TargetPort: 8080}, {Name: "metrics", Port: 90}},
		Endpoints: eps,
	}
}

func ep(uid string, ready bool, ports map[uint16]uint16) Endpoint {
	return Endpoint{WorkloadUID: uid, Ready: ready, Ports: ports}
}

// TestMultiClusterMerge: one namespace/name in two clusters is one
// service; each cluster's ClusterIP is a VIP of it, and a connection to
// either may go to an endpoint of either cluster.
func TestMultiClusterMerge(t *testing.T) {
	m := New("c1", "net1")
	m.UpsertWorkload(wl("c1", "net1", "a", "10.1.0.5", true, true))
	m.UpsertWorkload(wl("c2", "net1", "b", "10.2.0.5", true, true))
	m.UpsertService("c1", svc("10.96.0.10", "net1", ep("c1//Pod/ns/a", true, nil)))
	m.UpsertService("c2", svc("10.97.0.20", "net1", ep("c2//Pod/ns/b", true, nil)))

	for _, vip := range []string{"10.96.0.10:80", "10.97.0.20:80"} {
		seen := map[string]bool{}
		for range 200 {
			up, r := m.Resolve(addr(vip))
			if r != Found {
				t.Fatalf("%s: %v", vip, r)
			}
			seen[up.Addr.String()+" "+up.Identity.String()] = true
			if up.Service != (NamespacedName{"ns", "web"}) || !up.HBONE {
				t.Fatalf("%s: %+v", vip, up)
			}
		}
		want := []string{"10.1.0.5:8080 spiffe://cluster.local/ns/ns/sa/sa-a", "10.2.0.5:8080 spiffe://cluster.local/ns/ns/sa/sa-b"}
		for _, w := range want {
			if !seen[w] {
				t.Errorf("%s never went to %s (saw %v)", vip, w, seen)
			}
		}
	}

	// Removing cluster 2 (its remote secret went away) takes its VIP and
	// endpoints with it; cluster 1's view stays.
	m.DeleteCluster("c2")
	if _, r := m.Resolve(addr("10.97.0.20:80")); r != NotFound {
		t.Errorf("cluster 2's VIP after the cluster went: %v", r)
	}
	for range 50 {
		if up, r := m.Resolve(addr("10.96.0.10:80")); r != Found || up.Addr != addr("10.1.0.5:8080") {
			t.Fatalf("after cluster 2 went: %+v %v", up, r)
		}
	}
	if _, r := m.Resolve(addr("10.2.0.5:80")); r != NotFound {
		t.Errorf("cluster 2's pod after the cluster went: %v", r)
	}
}

// TestEndpointsOnlyInRemoteCluster: the e2e's case — the service exists in
// the local cluster without endpoints, its pods only in the other.
func TestEndpointsOnlyInRemoteCluster(t *testing.T) {
	m := New("c1", "net1")
	m.UpsertService("c1", svc("10.96.0.10", "net1"))
	if _, r := m.Resolve(addr("10.96.0.10:80")); r != NoEndpoint {
		t.Fatalf("no endpoints anywhere: %v, want %v", r, NoEndpoint)
	}
	m.UpsertWorkload(wl("c2", "net1", "b", "10.2.0.5", true, true))
	m.UpsertService("c2", svc("10.97.0.20", "net1", ep("c2//Pod/ns/b", true, nil)))
	up, r := m.Resolve(addr("10.96.0.10:80"))
	if r != Found || up.Addr != addr("10.2.0.5:8080") || up.Identity.ServiceAccount != "sa-b" || up.WorkloadUID != "c2//Pod/ns/b" {
		t.Fatalf("local VIP with remote endpoints: %+v %v", up, r)
	}
}

// TestPortMapping: numeric target ports come from the service, named ones
// from each endpoint (two pods may name different numbers); a port the
// service lacks is refused, and an endpoint that cannot resolve a named
// port is skipped.
func TestPortMapping(t *testing.T) {
	m := New("c1", "net1")
	m.UpsertWorkload(wl("c1", "net1", "a", "10.1.0.5", true, true))
	m.UpsertWorkload(wl("c1", "net1", "b", "10.1.0.6", true, true))
	m.UpsertService("c1", svc("10.96.0.10", "net1",
		ep("c1//Pod/ns/a", true, map[uint16]uint16{80: 8080, 90: 9091}),
		ep("c1//Pod/ns/b", true, map[uint16]uint16{80: 8080})))
	for range 50 {
		up, r := m.Resolve(addr("10.96.0.10:90"))
		if r != Found || up.Addr != addr("10.1.0.5:9091") {
			t.Fatalf("named port: %+v %v (b has no metrics port and must be skipped)", up, r)
		}
	}
	if _, r := m.Resolve(addr("10.96.0.10:81")); r != NoPort {
		t.Errorf("port not in the service: %v, want %v", r, NoPort)
	}
}

// TestReadiness: only endpoints ready in both the slice and the pod are
// chosen; a pod address resolves whatever the pod's readiness.
func TestReadiness(t *testing.T) {
	m := New("c1", "net1")
	m.UpsertWorkload(wl("c1", "net1", "a", "10.1.0.5", false, true)) // pod not ready
	m.UpsertWorkload(wl("c1", "net1", "b", "10.1.0.6", true, true))  // slice says not ready
	m.UpsertWorkload(wl("c1", "net1", "c", "10.1.0.7", true, true))
	m.UpsertService("c1", svc("10.96.0.10", "net1",
		ep("c1//Pod/ns/a", true, nil), ep("c1//Pod/ns/b", false, nil), ep("c1//Pod/ns/c", true, nil)))
	for range 50 {
		if up, _ := m.Resolve(addr("10.96.0.10:80")); up.Addr != addr("10.1.0.7:8080") {
			t.Fatalf("picked %v, want only the ready c", up.Addr)
		}
	}
	m.UpsertWorkload(wl("c1", "net1", "c", "10.1.0.7", false, true))
	if _, r := m.Resolve(addr("10.96.0.10:80")); r != NoEndpoint {
		t.Errorf("no ready endpoint: %v", r)
	}
	if up, r := m.Resolve(addr("10.1.0.5:8080")); r != Found || up.Identity.ServiceAccount != "sa-a" || up.Addr != addr("10.1.0.5:8080") {
		t.Errorf("unready pod by address: %+v %v", up, r)
	}
}

// TestEndpointChoice: endpoints on another network are not reached
// directly, nor at all while the model knows no gateway for it; a not-meshed pod is plain
// TCP without identity; an address-only endpoint (no pod) is plain TCP; a
// v6 VIP picks the endpoint's v6 address.
func TestEndpointChoice(t *testing.T) {
	m := New("c1", "net1")
	m.UpsertWorkload(wl("c2", "net2", "far", "10.2.0.5", true, true))
	m.UpsertService("c2", svc("10.97.0.20", "net2", ep("c2//Pod/ns/far", true, nil)))
	m.UpsertService("c1", svc("10.96.0.10", "net1"))
	if _, r := m.Resolve(addr("10.96.0.10:80")); r != NoGateway {
		t.Errorf("only another network's endpoint: %v, want %v", r, NoGateway)
	}
	if _, r := m.Resolve(addr("10.97.0.20:80")); r != NotFound {
		t.Errorf("another network's VIP is not ours: %v", r)
	}

	plain := wl("c1", "net1", "plain", "10.1.0.9", true, false)
	plain.IPs = append(plain.IPs, ip("fd00::9"))
	m.UpsertWorkload(plain)
	m.UpsertService("c1", Service{Namespace: "ns", Name: "web",
		VIPs:  []NetworkAddr{{"net1", ip("10.96.0.10")}, {"net1", ip("fd00:96::10")}},
		Ports: []Port{{Port: 80, TargetPort: 8080}}, Endpoints: []Endpoint{ep("c1//Pod/ns/plain", true, nil)}})
	up, r := m.Resolve(addr("10.96.0.10:80"))
	if r != Found || up.HBONE || !up.Identity.IsZero() || up.Addr != addr("10.1.0.9:8080") {
		t.Errorf("not-meshed endpoint: %+v %v", up, r)
	}
	if up, _ := m.Resolve(addr("[fd00:96::10]:80")); up.Addr != addr("[fd00::9]:8080") {
		t.Errorf("v6 VIP went to %v", up.Addr)
	}

	m.UpsertService("c1", Service{Namespace: "default", Name: "kubernetes",
		VIPs: []NetworkAddr{{"net1", ip("10.96.0.1")}}, Ports: []Port{{Name: "https", Port: 443, TargetPort: 6443}},
		Endpoints: []Endpoint{{Addrs: []netip.Addr{ip("172.18.0.2")}, Network: "net1", Ready: true}}})
	if up, r := m.Resolve(addr("10.96.0.1:443")); r != Found || up.HBONE || up.Addr != addr("172.18.0.2:6443") {
		t.Errorf("address-only endpoint: %+v %v", up, r)
	}
}

// TestRemoval: deleting one cluster's view keeps the others'; deleting a
// workload removes its address; a VIP both clusters use resolves to the
// local cluster's service.
func TestRemoval(t *testing.T) {
	m := New("c1", "net1")
	m.UpsertWorkload(wl("c1", "net1", "a", "10.1.0.5", true, true))
	m.UpsertWorkload(wl("c2", "net1", "b", "10.2.0.5", true, true))
	m.UpsertService("c1", svc("10.96.0.10", "net1", ep("c1//Pod/ns/a", true, nil)))
	m.UpsertService("c2", svc("10.97.0.20", "net1", ep("c2//Pod/ns/b", true, nil)))
	m.DeleteService("c1", NamespacedName{"ns", "web"})
	if _, r := m.Resolve(addr("10.96.0.10:80")); r != NotFound {
		t.Errorf("c1's VIP after c1 deleted its service: %v", r)
	}
	if up, r := m.Resolve(addr("10.97.0.20:80")); r != Found || up.Addr != addr("10.2.0.5:8080") {
		t.Errorf("c2's view after c1 deleted its: %+v %v", up, r)
	}
	m.DeleteWorkload("c2", "c2//Pod/ns/b")
	if _, r := m.Resolve(addr("10.2.0.5:8080")); r != NotFound {
		t.Errorf("deleted workload's address: %v", r)
	}
	if _, r := m.Resolve(addr("10.97.0.20:80")); r != NoEndpoint {
		t.Errorf("service whose only pod is gone: %v", r)
	}

	// Same ClusterIP, different services in two clusters: ours wins.
	other := svc("10.96.0.10", "net1", ep("c2//Pod/ns/x", true, nil))
	other.Name = "other"
	m.UpsertWorkload(wl("c2", "net1", "x", "10.2.0.9", true, true))
	m.UpsertService("c2", other)
	m.UpsertService("c1", svc("10.96.0.10", "net1", ep("c1//Pod/ns/a", true, nil)))
	for range 20 {
		if up, _ := m.Resolve(addr("10.96.0.10:80")); up.Service.Name != "web" {
			t.Fatalf("clashing VIP resolved to %v, want the local cluster's web", up.Service)
		}
	}
	m.DeleteService("c1", NamespacedName{"ns", "web"})
	if up, _ := m.Resolve(addr("10.96.0.10:80")); up.Service.Name != "other" {
		t.Errorf("after the local one went, the VIP resolved to %v", up.Service)
	}
}

// TestReusedAddress: a finished pod's address taken by a new pod resolves
// to the ready one, and to the new one alone once the old is deleted.
func TestReusedAddress(t *testing.T) {
	m := New("c1", "net1")
	m.UpsertWorkload(wl("c1", "net1", "old", "10.1.0.5", false, true))
	m.UpsertWorkload(wl("c1", "net1", "new", "10.1.0.5", true, true))
	if up, _ := m.Resolve(addr("10.1.0.5:80")); up.Identity.ServiceAccount != "sa-new" {
		t.Errorf("reused address resolved to %v", up.Identity)
	}
	m.DeleteWorkload("c1", "c1//Pod/ns/new")
	if up, _ := m.Resolve(addr("10.1.0.5:80")); up.Identity.ServiceAccount != "sa-old" {
		t.Errorf("after delete: %v", up.Identity)
	}
}

// TestDumpShape: config_dump's model part has ztunnel's field names.
func TestDumpShape(t *testing.T) {
	m := New("c1", "net1")
	m.UpsertWorkload(wl("c1", "net1", "a", "10.1.0.5", true, true))
	m.UpsertService("c1", svc("10.96.0.10", "net1", ep("c1//Pod/ns/a", true, map[uint16]uint16{90: 9090})))
	b, err := json.Marshal(m.Dump())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"workloads":[{"uid":"c1//Pod/ns/a","workloadIps":["10.1.0.5"],"protocol":"HBONE","name":"a","namespace":"ns","trustDomain":"cluster.local","serviceAccount":"sa-a","network":"net1","node":"node-c1","status":"Healthy","clusterId":"c1","services":["ns/web.ns.svc.cluster.local"]}]`,
		`"vips":["net1/10.96.0.10"]`, `"ports":{"80":8080,"90":0}`,
		`"endpoints":{"c1//Pod/ns/a":{"workloadUid":"c1//Pod/ns/a","port":{"80":8080,"90":9090},"status":"Healthy"}}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("dump lacks %s:\n%s", want, b)
		}
	}
}

func TestResolveAllocatesNothing(t *testing.T) {
	m := New("c1", "net1")
	for i, name := range []string{"a", "b", "c"} {
		m.UpsertWorkload(wl("c1", "net1", name, "10.1.0."+string(rune('5'+i)), true, true))
	}
	m.UpsertService("c1", svc("10.96.0.10", "net1", ep("c1//Pod/ns/a", true, nil), ep("c1//Pod/ns/b", true, nil), ep("c1//Pod/ns/c", true, nil)))
	vip, pod := addr("10.96.0.10:80"), addr("10.1.0.6:80")
	if n := testing.AllocsPerRun(100, func() { m.Resolve(vip); m.Resolve(pod) }); n != 0 {
		t.Errorf("Resolve allocates %v times per call", n)
	}
}

func BenchmarkResolveVIP(b *testing.B) {
	m := New("c1", "net1")
	var eps []Endpoint
	for i := range 50 {
		w := wl("c1", "net1", "p"+string(rune('A'+i)), netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}).String(), true, true)
		m.UpsertWorkload(w)
		eps = append(eps, ep(w.UID, true, nil))
	}
	m.UpsertService("c1", svc("10.96.0.10", "net1", eps...))
	vip := addr("10.96.0.10:80")
	b.ReportAllocs()
	for b.Loop() {
		m.Resolve(vip)
	}
}
