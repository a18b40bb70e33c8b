package xds

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
)

func addr(name string, v []byte) Resource {
	return Resource{Name: name, Version: "v1", TypeURL: AddressType, Value: v}
}

func pol(name string, v []byte) Resource {
	return Resource{Name: name, Version: "v1", TypeURL: AuthorizationType, Value: v}
}

var (
	server = testWorkload{uid: "c2//Pod/ns-b/server", name: "server", ns: "ns-b", sa: "sa-b", cluster: "c2",
		ips: []string{"10.2.0.5"}, hbone: true, node: "n2",
		services: map[string][][2]uint32{"ns-b/echo.ns-b.svc.cluster.local": {{80, 8080}}},
		policies: []string{"ns-b/allow-a"}}
	echo = testService{name: "echo", ns: "ns-b", host: "echo.ns-b.svc.cluster.local", vips: []string{"10.96.0.10"}, ports: [][2]uint32{{80, 8080}}}
)

// TestStateJoinsWorkloadsAndServices: WDS's services have no endpoints;
// the workloads that name them are the endpoints, whichever arrives first,
// and a Service VIP resolves to the workload's ip:targetPort over HBONE
// with its identity required.
func TestStateJoinsWorkloadsAndServices(t *testing.T) {
	for _, order := range []string{"workload first", "service first"} {
		t.Run(order, func(t *testing.T) {
			m := model.New("c1", "")
			st := newState(m, policy.NewStore(""), "c1")
			rs := []Resource{addr(server.uid, server.encode()), addr("ns-b/echo.ns-b.svc.cluster.local", echo.encode())}
			if order == "service first" {
				rs[0], rs[1] = rs[1], rs[0]
			}
			for _, r := range rs {
				if rej := st.handle(AddressType, []Resource{r}, nil); rej != nil {
					t.Fatalf("rejected: %v", rej)
				}
			}
			up, res := m.Resolve(netip.MustParseAddrPort("10.96.0.10:80"))
			if res != model.Found {
				t.Fatalf("VIP: %v", res)
			}
			want := model.Upstream{Addr: netip.MustParseAddrPort("10.2.0.5:8080"), HBONE: true, WorkloadUID: server.uid,
				Identity: identity.New("cluster.local", "ns-b", "sa-b"), Service: model.NamespacedName{Namespace: "ns-b", Name: "echo"}}
			if !reflect.DeepEqual(up, want) {
				t.Fatalf("VIP resolved to %+v, want %+v", up, want)
			}
			if _, res := m.Resolve(netip.MustParseAddrPort("10.96.0.10:81")); res != model.NoPort {
				t.Fatalf("unknown port: %v", res)
			}
			if got := m.BoundPoliciesAt(netip.MustParseAddr("10.2.0.5")); len(got) != 1 || got[0] != "ns-b/allow-a" {
				t.Fatalf("bound policies %v", got)
			}

			// Unhealthy: no endpoint. Removed: the service has none left.
			bad := server
			bad.unhealthy = true
			st.handle(AddressType, []Resource{addr(server.uid, bad.encode())}, nil)
			if _, res := m.Resolve(netip.MustParseAddrPort("10.96.0.10:80")); res != model.NoEndpoint {
				t.Fatalf("unhealthy endpoint: %v", res)
			}
			st.handle(AddressType, []Resource{addr(server.uid, server.encode())}, nil)
			st.handle(AddressType, nil, []string{server.uid})
			if _, res := m.Resolve(netip.MustParseAddrPort("10.96.0.10:80")); res != model.NoEndpoint {
				t.Fatalf("removed workload: %v", res)
			}
			if _, res := m.Resolve(netip.MustParseAddrPort("10.2.0.5:8080")); res != model.NotFound {
				t.Fatalf("removed workload's IP: %v", res)
			}
			st.handle(AddressType, nil, []string{"ns-b/echo.ns-b.svc.cluster.local"})
			if _, res := m.Resolve(netip.MustParseAddrPort("10.96.0.10:80")); res != model.NotFound {
				t.Fatalf("removed service: %v", res)
			}
			if d := m.Dump(); len(d.Services)+len(d.Workloads) != 0 {
				t.Fatalf("model not empty: %+v", d)
			}
		})
	}
}

// TestStateRejectsBadResourcesAndKeepsTheRest: one workload with a 5-byte
// address is refused by name; the others of the same response apply, and
// the refused one keeps its previous version.
func TestStateRejectsBadResourcesAndKeepsTheRest(t *testing.T) {
	m := model.New("c1", "")
	st := newState(m, policy.NewStore(""), "c1")
	st.handle(AddressType, []Resource{addr(server.uid, server.encode())}, nil)
	broken := server
	broken.ips, broken.rawAddr = []string{"10.2.0.9"}, []byte{1, 2, 3, 4, 5}
	other := testWorkload{uid: "c2//Pod/ns-b/other", name: "other", ns: "ns-b", ips: []string{"10.2.0.6"}}
	rej := st.handle(AddressType, []Resource{
		addr(server.uid, broken.encode()),
		addr(other.uid, other.encode()),
		{Name: "wrong-type", TypeURL: AuthorizationType, Value: nil},
		addr("garbage", []byte{0xff}),
	}, nil)
	if len(rej) != 3 || rej[0].Name != server.uid || rej[1].Name != "wrong-type" || rej[2].Name != "garbage" {
		t.Fatalf("rejects %v", rej)
	}
	if d := joinRejects(rej); !strings.Contains(d, server.uid+": decoding Workload: workload address: 5 bytes") || strings.Count(d, "; ") != 2 {
		t.Fatalf("NACK detail %q", d)
	}
	if _, res := m.Resolve(netip.MustParseAddrPort("10.2.0.5:1")); res != model.Found {
		t.Fatal("the refused update replaced the workload's previous version")
	}
	if _, res := m.Resolve(netip.MustParseAddrPort("10.2.0.6:1")); res != model.Found {
		t.Fatal("a valid workload of the same response was not applied")
	}
	// A default service account and trust domain, as ztunnel fills them.
	up, _ := m.Resolve(netip.MustParseAddrPort("10.2.0.6:1"))
	if up.HBONE || up.WorkloadUID != other.uid {
		t.Fatalf("plain TCP workload resolved to %+v", up)
	}
	for _, w := range m.Dump().Workloads {
		if w.UID == other.uid && (w.ServiceAccount != "default" || w.TrustDomain != "cluster.local") {
			t.Fatalf("defaults not applied: %+v", w)
		}
	}
}

// TestStateAuthorizationFeedsThePolicyStore: istiod's selector policy
// arrives without a selector and applies to the workloads that name it;
// a namespace policy applies to its namespace; removal takes it out.
func TestStateAuthorizationFeedsThePolicyStore(t *testing.T) {
	store := policy.NewStore("")
	st := newState(model.New("c1", ""), store, "c1")
	rej := st.handle(AuthorizationType, []Resource{
		pol("ns-b/allow-a", authz("allow-a", "ns-b", 2, 0, principalMatch("cluster.local/ns/ns-a/sa/sa-a"))),
		pol("ns-b/deny-9000", authz("deny-9000", "ns-b", 1, 1, portsMatch(9000))),
	}, nil)
	if rej != nil {
		t.Fatal(rej)
	}
	bound := policy.Workload{Namespace: "ns-b", Policies: []string{"ns-b/allow-a"}}
	unbound := policy.Workload{Namespace: "ns-b"}
	a := identity.New("cluster.local", "ns-a", "sa-a")
	c := identity.New("cluster.local", "ns-c", "sa-c")
	conn := func(peer identity.Identity, port uint16) policy.Conn {
		return policy.Conn{Peer: peer, Src: netip.MustParseAddr("10.1.0.1"), Dst: netip.AddrPortFrom(netip.MustParseAddr("10.2.0.5"), port)}
	}
	for _, tc := range []struct {
		name   string
		w      policy.Workload
		c      policy.Conn
		allow  bool
		reason string
	}{
		{"bound ALLOW matches", bound, conn(a, 8080), true, ""},
		{"bound ALLOW does not match", bound, conn(c, 8080), false, policy.ReasonNotAllowed},
		{"not bound: no ALLOW applies", unbound, conn(c, 8080), true, ""},
		{"namespace DENY", unbound, conn(a, 9000), false, policy.ReasonDenied},
	} {
		d := store.Check(tc.c, tc.w)
		if d.Allowed != tc.allow || d.Reason != tc.reason {
			t.Errorf("%s: %+v", tc.name, d)
		}
	}
	st.handle(AuthorizationType, nil, []string{"ns-b/allow-a", "ns-b/deny-9000"})
	if d := store.Check(conn(c, 9000), bound); !d.Allowed {
		t.Fatalf("after removal: %+v", d)
	}
	if len(store.Dump()) != 0 {
		t.Fatalf("store not empty: %v", store.Dump())
	}
}

// TestAuthorizationDecoding covers every Match field and ztunnel's
// leniency: unset string matches and bad addresses are dropped; a port
// above 65535 is refused.
func TestAuthorizationDecoding(t *testing.T) {
	sa := str(str(nil, 1, "ns-a"), 2, "sa-a")
	m := msg(nil, 1, str(nil, 2, "ns-"))                                         // namespaces prefix
	m = msg(m, 2, str(nil, 3, "-x"))                                             // not_namespaces suffix
	m = msg(m, 3, msg(nil, 4, nil))                                              // principals presence
	m = msg(m, 4, nil)                                                           // not_principals: unset, dropped
	m = msg(m, 5, appendVarint(appendBytes(nil, 1, []byte{10, 1, 0, 0}), 2, 16)) // source_ips
	m = msg(m, 6, appendBytes(nil, 1, []byte{1, 2, 3}))                          // not_source_ips: bad, dropped
	m = msg(m, 7, appendVarint(appendBytes(nil, 1, netip.MustParseAddr("fd00::1").AsSlice()), 2, 128))
	m = append(m, portsMatch(80, 443)...)
	m = protowire.AppendTag(m, 10, protowire.VarintType) // unpacked not_destination_ports
	m = protowire.AppendVarint(m, 8080)
	m = msg(m, 11, sa)
	m = msg(m, 12, sa)
	a, err := unmarshalAuthorization(append(authz("p", "ns", 1, 1, m), appendVarint(nil, 6, 1)...))
	if err != nil {
		t.Fatal(err)
	}
	got := a.Rules[0][0][0]
	want := policy.Match{
		Namespaces:          []policy.StringMatch{{Kind: policy.Prefix, Value: "ns-"}},
		NotNamespaces:       []policy.StringMatch{{Kind: policy.Suffix, Value: "-x"}},
		Principals:          []policy.StringMatch{{Kind: policy.Presence}},
		SourceIPs:           []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
		DestinationIPs:      []netip.Prefix{netip.MustParsePrefix("fd00::1/128")},
		DestinationPorts:    []uint16{80, 443},
		NotDestinationPorts: []uint16{8080},
		ServiceAccounts:     []policy.ServiceAccountMatch{{Namespace: "ns-a", ServiceAccount: "sa-a"}},
		NotServiceAccounts:  []policy.ServiceAccountMatch{{Namespace: "ns-a", ServiceAccount: "sa-a"}},
	}
	if !reflectEqual(got, want) || a.Scope != policy.ScopeNamespace || a.Action != policy.Deny || !a.DryRun || a.Selector != nil {
		t.Fatalf("got %+v (%+v), want %+v", got, a, want)
	}
	if _, err := unmarshalAuthorization(authz("p", "ns", 1, 1, portsMatch(70000))); err == nil || !strings.Contains(err.Error(), "port 70000 out of range") {
		t.Fatalf("port 70000: %v", err)
	}
	if _, err := unmarshalAuthorization(authz("p", "ns", 7, 1)); err == nil {
		t.Fatal("unknown scope accepted")
	}
}
