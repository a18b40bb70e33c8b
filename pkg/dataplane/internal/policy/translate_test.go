package policy

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

func fromYAML(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatalf("test YAML: %v", err)
	}
	return u
}

// The translation of a full policy, shown in ztunnel's config_dump shape.
func TestAuthorizationFromUnstructured(t *testing.T) {
	t.Parallel()
	a, warn, err := AuthorizationFromUnstructured(fromYAML(t, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: p, namespace: foo}
spec:
  selector: {matchLabels: {app: web}}
  action: DENY
  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/a/sa/b", "*"]
        notNamespaces: ["kube-*"]
        ipBlocks: ["10.0.0.0/8", "1.2.3.4", "not-an-ip"]
        serviceAccounts: ["sa", "other/sa2"]
    to:
    - operation: {ports: ["80", "http"], notPorts: ["81"]}
    when:
    - {key: destination.ip, values: ["fd00::1"]}
`), "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"p","namespace":"foo","scope":"WorkloadSelector","action":"Deny","rules":[[` +
		`[{"destinationPorts":[80],"notDestinationPorts":[81]}],` +
		`[{"notNamespaces":[{"Prefix":"kube-"}],"serviceAccounts":[{"namespace":"foo","serviceAccount":"sa"},{"namespace":"other","serviceAccount":"sa2"}],` +
		`"principals":[{"Exact":"cluster.local/ns/a/sa/b"},{"Presence":[]}],"sourceIps":["10.0.0.0/8","1.2.3.4/32"]}],` +
		`[{"destinationIps":["fd00::1/128"]}]]],"dryRun":false,"selector":{"app":"web"}}`
	if string(got) != want {
		t.Errorf("translation:\n got %s\nwant %s", got, want)
	}
	// The values istiod drops are dropped, and said so.
	if w := strings.Join(warn, "\n"); !strings.Contains(w, `port "http"`) || !strings.Contains(w, `address "not-an-ip"`) {
		t.Errorf("warnings = %q, want the dropped port and address named", warn)
	}
}

// Malformed objects (the CRD schema and Istio's webhook would refuse them)
// fail safe: ALLOW matches nothing, DENY matches everything, and a policy
// whose action or selection cannot be read denies its whole namespace.
func TestAuthorizationFromUnstructuredMalformed(t *testing.T) {
	t.Parallel()
	web := Workload{Namespace: "foo", Labels: map[string]string{"app": "web"}}
	other := Workload{Namespace: "foo", Labels: map[string]string{"app": "other"}}
	conn := Conn{Peer: identity.New("cluster.local", "bar", "client"), Src: netip.MustParseAddr("10.0.1.1"), Dst: netip.MustParseAddrPort("10.0.2.2:80")}
	tests := []struct {
		name, spec string
		warn       string // a substring of the warning: the field at fault
		web, other string // the decision for each workload: "allow" or a reason
	}{
		{
			name: "ALLOW rule of the wrong type matches nothing; the good rule still counts",
			spec: `{selector: {matchLabels: {app: web}}, rules: [{from: "bar"}, {to: [{operation: {ports: ["8080"]}}]}]}`,
			warn: "spec.rules[0]: field from: want a list", web: ReasonNotAllowed, other: "allow",
		},
		{
			name: "ALLOW rules not a list: the policy matches nothing",
			spec: `{selector: {matchLabels: {app: web}}, rules: {from: []}}`,
			warn: "spec.rules: want a list", web: ReasonNotAllowed, other: "allow",
		},
		{
			name: "DENY rule of the wrong type denies",
			spec: `{action: DENY, selector: {matchLabels: {app: web}}, rules: [{from: [{source: {namespaces: "bar"}}]}]}`,
			warn: "field from.source.namespaces: want a list", web: ReasonDenied, other: "allow",
		},
		{
			name: "DENY rules not a list denies",
			spec: `{action: DENY, selector: {matchLabels: {app: web}}, rules: "all"}`,
			warn: "spec.rules", web: ReasonDenied, other: "allow",
		},
		{
			name: "unknown action denies what it selects",
			spec: `{action: REJECT, selector: {matchLabels: {app: web}}, rules: [{}]}`,
			warn: `unknown action "REJECT"`, web: ReasonDenied, other: "allow",
		},
		{
			name: "action of the wrong type denies the namespace",
			spec: `{action: [DENY], selector: {matchLabels: {app: web}}}`,
			warn: "spec.action: want a string", web: ReasonDenied, other: ReasonDenied,
		},
		{
			name: "selector of the wrong type denies the namespace",
			spec: `{selector: {matchLabels: [app, web]}, rules: [{}]}`,
			warn: "spec.selector: field matchLabels: want an object", web: ReasonDenied, other: ReasonDenied,
		},
		{
			name: "spec not an object denies the namespace",
			spec: `[]`,
			warn: "spec: want an object", web: ReasonDenied, other: ReasonDenied,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := fromYAML(t, "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: bad, namespace: foo}\nspec: "+tt.spec)
			a, warn, err := AuthorizationFromUnstructured(u, "")
			if err != nil {
				t.Fatal(err)
			}
			if w := strings.Join(warn, "\n"); !strings.Contains(w, tt.warn) {
				t.Errorf("warnings = %q, want one containing %q", warn, tt.warn)
			}
			s := NewSnapshot("", []*Authorization{a}, nil)
			for _, c := range []struct {
				w    Workload
				want string
			}{{web, tt.web}, {other, tt.other}} {
				d := s.Check(conn, c.w)
				got := "allow"
				if !d.Allowed {
					got = d.Reason
				}
				if got != c.want {
					t.Errorf("to %v: %s, want %s", c.w.Labels, got, c.want)
				}
			}
		})
	}
}

func TestAuthorizationFromUnstructuredNoName(t *testing.T) {
	t.Parallel()
	_, _, err := AuthorizationFromUnstructured(fromYAML(t, "kind: AuthorizationPolicy\nmetadata: {name: x}\nspec: {}"), "")
	if err == nil || !strings.Contains(err.Error(), "namespace and name are required") {
		t.Fatalf("err = %v", err)
	}
}

func TestPeerAuthenticationFromUnstructured(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, spec string
		mode       Mode
		ports      map[uint32]Mode
		warn       string
	}{
		{name: "strict", spec: `{mtls: {mode: STRICT}}`, mode: ModeStrict},
		{name: "unset", spec: `{}`, mode: ModeUnset},
		{name: "port level", spec: `{selector: {matchLabels: {a: b}}, mtls: {mode: STRICT}, portLevelMtls: {"8080": {mode: PERMISSIVE}, "9090": {mode: UNSET}}}`,
			mode: ModeStrict, ports: map[uint32]Mode{8080: ModePermissive}},
		{name: "port level without selector is ignored", spec: `{portLevelMtls: {"8080": {mode: PERMISSIVE}}}`, warn: "only with a workload selector"},
		{name: "bad port key", spec: `{selector: {matchLabels: {a: b}}, portLevelMtls: {"http": {mode: STRICT}}}`, warn: `key "http" is not a port`},
		{name: "unknown mode is STRICT", spec: `{mtls: {mode: STRICTEST}}`, mode: ModeStrict, warn: `unknown mTLS mode "STRICTEST"`},
		{name: "mode of the wrong type is STRICT", spec: `{mtls: {mode: 1}}`, mode: ModeStrict, warn: "field mtls.mode: want a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := fromYAML(t, "kind: PeerAuthentication\nmetadata: {name: p, namespace: foo}\nspec: "+tt.spec)
			p, warn, err := PeerAuthenticationFromUnstructured(u)
			if err != nil {
				t.Fatal(err)
			}
			if p.Mode != tt.mode || len(p.PortModes) != len(tt.ports) {
				t.Errorf("mode %v ports %v, want %v %v", p.Mode, p.PortModes, tt.mode, tt.ports)
			}
			for k, v := range tt.ports {
				if p.PortModes[k] != v {
					t.Errorf("port %d: %v, want %v", k, p.PortModes[k], v)
				}
			}
			if w := strings.Join(warn, "\n"); (tt.warn == "") != (w == "") || !strings.Contains(w, tt.warn) {
				t.Errorf("warnings = %q, want %q", warn, tt.warn)
			}
		})
	}
}

func TestDumpShowsStaticStrict(t *testing.T) {
	t.Parallel()
	s := NewStore("")
	s.SetAuthorization("foo/a", &Authorization{Name: "a", Namespace: "foo", Scope: ScopeNamespace, Rules: [][][]Match{}})
	if d := s.Dump(); len(d) != 1 {
		t.Fatalf("dump = %v", d)
	}
	s.SetPeerAuthentication("istio-system/default", &PeerAuthentication{Name: "default", Namespace: "istio-system", Mode: ModeStrict})
	got, _ := json.Marshal(s.Dump())
	want := `[{"name":"a","namespace":"foo","scope":"Namespace","action":"Allow","rules":[],"dryRun":false},` +
		`{"name":"istio_converted_static_strict","namespace":"istio-system","scope":"WorkloadSelector","action":"Deny","rules":[[[{"notPrincipals":[{"Presence":[]}]}]]],"dryRun":false}]`
	if string(got) != want {
		t.Errorf("dump:\n got %s\nwant %s", got, want)
	}
}
