package policy

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
)

// parse reads a YAML stream of AuthorizationPolicies and PeerAuthentications
// into a snapshot, failing the test on anything it had to warn about unless
// allowWarn.
func parse(t *testing.T, docs string) *Snapshot {
	t.Helper()
	var authz []*Authorization
	var peers []*PeerAuthentication
	for _, doc := range strings.Split(docs, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("test YAML: %v\n%s", err, doc)
		}
		switch u.GetKind() {
		case "AuthorizationPolicy":
			a, _, err := AuthorizationFromUnstructured(u, "")
			if err != nil {
				t.Fatal(err)
			}
			if a != nil {
				authz = append(authz, a)
			}
		case "PeerAuthentication":
			p, _, err := PeerAuthenticationFromUnstructured(u)
			if err != nil {
				t.Fatal(err)
			}
			peers = append(peers, p)
		default:
			t.Fatalf("test YAML: kind %q", u.GetKind())
		}
	}
	return NewSnapshot("", authz, peers)
}

// A connection from a pod in the mesh (identity) or plaintext (no identity).
type call struct {
	from   string // "ns/sa", or "" for plaintext
	src    string
	dstNS  string
	labels map[string]string
	port   uint16
	want   string // "allow", or the Decision's reason
	policy string // the denying policy, when checked
}

func (c call) check(t *testing.T, s *Snapshot) {
	t.Helper()
	conn := Conn{Src: netip.MustParseAddr(c.src), Dst: netip.AddrPortFrom(netip.MustParseAddr("10.0.2.9"), c.port)}
	if c.from != "" {
		ns, sa, _ := strings.Cut(c.from, "/")
		conn.Peer = identity.New("cluster.local", ns, sa)
	}
	d := s.Check(conn, Workload{Namespace: c.dstNS, Labels: c.labels})
	got := "allow"
	if !d.Allowed {
		got = d.Reason
	}
	if got != c.want || (c.policy != "" && d.Policy != c.policy) {
		t.Errorf("%s (src %s) → %s %v :%d = %s (policy %q), want %s %s", c.from, c.src, c.dstNS, c.labels, c.port, got, d.Policy, c.want, c.policy)
	}
}

var httpbin = map[string]string{"app": "httpbin", "version": "v1"}

func TestCheckIstioExamples(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		policies string
		calls    []call
	}{
		{
			name:     "no policies: allow",
			policies: ``,
			calls:    []call{{from: "a/b", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"}, {src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"}},
		},
		{
			// https://istio.io/latest/docs/reference/config/security/authorization-policy/ "allow-nothing"
			name: "allow-nothing denies the namespace, not others",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-nothing, namespace: foo}
spec: {}`,
			calls: []call{
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonNotAllowed},
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "bar", port: 80, want: "allow"},
			},
		},
		{
			name: "allow-nothing with an explicit action",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-nothing, namespace: foo}
spec: {action: ALLOW}`,
			calls: []call{{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonNotAllowed}},
		},
		{
			// the reference's "deny-all"
			name: "deny-all",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-all, namespace: foo}
spec:
  action: DENY
  rules: [{}]`,
			calls: []call{
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonDenied, policy: "foo/deny-all"},
				{src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonDenied},
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "bar", port: 80, want: "allow"},
			},
		},
		{
			// the reference's "allow-all": an ALLOW with an empty rule matches everything,
			// and DENY still wins over it.
			name: "allow-all, deny wins",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-all, namespace: foo}
spec:
  action: ALLOW
  rules: [{}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-bar, namespace: foo}
spec:
  action: DENY
  rules:
  - from: [{source: {namespaces: ["bar"]}}]`,
			calls: []call{
				{from: "baz/x", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
				{src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
				{from: "bar/x", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonDenied, policy: "foo/deny-bar"},
			},
		},
		{
			// the reference's "httpbin-deny": DENY from outside foo to httpbin v1.
			name: "selector DENY notNamespaces",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: httpbin-deny, namespace: foo}
spec:
  selector:
    matchLabels: {app: httpbin, version: v1}
  action: DENY
  rules:
  - from:
    - source:
        notNamespaces: ["foo"]`,
			calls: []call{
				{from: "bar/x", src: "10.0.1.1", dstNS: "foo", labels: httpbin, port: 80, want: ReasonDenied},
				{from: "foo/x", src: "10.0.1.1", dstNS: "foo", labels: httpbin, port: 80, want: "allow"},
				{from: "bar/x", src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "httpbin", "version": "v2"}, port: 80, want: "allow"},
				{from: "bar/x", src: "10.0.1.1", dstNS: "other", labels: httpbin, port: 80, want: "allow"},
				// plaintext has no namespace: notNamespaces matches it.
				{src: "10.0.1.1", dstNS: "foo", labels: httpbin, port: 80, want: ReasonDenied},
			},
		},
		{
			// The reference's first example, with HTTP attributes: at L4 the
			// ALLOW rule is dropped, so the policy allows nothing.
			name: "ALLOW with HTTP attributes matches nothing",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: httpbin, namespace: foo}
spec:
  action: ALLOW
  rules:
  - from:
    - source: {principals: ["cluster.local/ns/default/sa/sleep"]}
    - source: {namespaces: ["test"]}
    to:
    - operation: {methods: ["GET"], paths: ["/info*"]}
    - operation: {methods: ["POST"], paths: ["/data"]}
    when:
    - key: request.auth.claims[iss]
      values: ["https://accounts.google.com"]`,
			calls: []call{
				{from: "default/sleep", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonNotAllowed},
				{from: "test/x", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonNotAllowed},
			},
		},
		{
			name: "principals and namespaces, the same rule without HTTP attributes",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: httpbin, namespace: foo}
spec:
  rules:
  - from:
    - source: {principals: ["cluster.local/ns/default/sa/sleep"]}
    - source: {namespaces: ["test"]}`,
			calls: []call{
				{from: "default/sleep", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
				{from: "default/other", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonNotAllowed},
				{from: "test/x", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
				{src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonNotAllowed},
			},
		},
		{
			// https://istio.io/latest/docs/tasks/security/authorization/authz-tcp/
			name: "TCP ports; adding methods makes the ALLOW rule match nothing",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: tcp-policy, namespace: foo}
spec:
  selector: {matchLabels: {app: tcp-echo}}
  action: ALLOW
  rules:
  - to: [{operation: {ports: ["9000", "9001"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: tcp-policy-http, namespace: foo}
spec:
  selector: {matchLabels: {app: tcp-echo-http}}
  action: ALLOW
  rules:
  - to: [{operation: {methods: ["GET"], ports: ["9000"]}}]`,
			calls: []call{
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "tcp-echo"}, port: 9000, want: "allow"},
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "tcp-echo"}, port: 9001, want: "allow"},
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "tcp-echo"}, port: 9002, want: ReasonNotAllowed},
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "tcp-echo-http"}, port: 9000, want: ReasonNotAllowed},
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "other"}, port: 9002, want: "allow"},
			},
		},
		{
			// The same task's DENY: the HTTP attribute is dropped and the
			// rest kept, so port 9000 is denied whatever the method; a
			// clause left empty (methods only) matches nothing, as in ztunnel.
			name: "DENY with HTTP attributes",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: tcp-deny, namespace: foo}
spec:
  action: DENY
  rules:
  - to: [{operation: {methods: ["GET"], ports: ["9000"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: methods-only, namespace: foo}
spec:
  action: DENY
  rules:
  - to: [{operation: {methods: ["GET"]}}]`,
			calls: []call{
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", port: 9000, want: ReasonDenied, policy: "foo/tcp-deny"},
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", port: 9001, want: "allow"},
			},
		},
		{
			name: "notPorts and when destination.port",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-not-80, namespace: foo}
spec:
  action: DENY
  rules:
  - to: [{operation: {notPorts: ["80"]}}]
    when:
    - key: destination.port
      notValues: ["443"]`,
			calls: []call{
				{from: "a/b", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
				{from: "a/b", src: "10.0.1.1", dstNS: "foo", port: 443, want: "allow"},
				{from: "a/b", src: "10.0.1.1", dstNS: "foo", port: 8080, want: ReasonDenied},
			},
		},
		{
			// https://istio.io/latest/docs/tasks/security/authorization/authz-ingress/ (ipBlocks)
			name: "ipBlocks and notIpBlocks, addresses and CIDRs",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ip-allow, namespace: foo}
spec:
  rules:
  - from:
    - source:
        ipBlocks: ["1.2.3.4", "5.6.7.0/24", "fd00::/8"]
        notIpBlocks: ["5.6.7.8"]`,
			calls: []call{
				{from: "a/b", src: "1.2.3.4", dstNS: "foo", port: 80, want: "allow"},
				{src: "5.6.7.9", dstNS: "foo", port: 80, want: "allow"},
				{from: "a/b", src: "5.6.7.8", dstNS: "foo", port: 80, want: ReasonNotAllowed},
				{from: "a/b", src: "1.2.3.5", dstNS: "foo", port: 80, want: ReasonNotAllowed},
				{from: "a/b", src: "fd00::1", dstNS: "foo", port: 80, want: "allow"},
			},
		},
		{
			name: "when source.ip, source.namespace, source.principal, destination.ip",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: when, namespace: foo}
spec:
  rules:
  - when:
    - {key: source.ip, values: ["10.0.0.0/8"]}
    - {key: source.namespace, values: ["bar"]}
    - {key: source.principal, notValues: ["cluster.local/ns/bar/sa/evil"]}
    - {key: destination.ip, values: ["10.0.2.9"]}`,
			calls: []call{
				{from: "bar/good", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
				{from: "bar/evil", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonNotAllowed},
				{from: "baz/good", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonNotAllowed},
				{from: "bar/good", src: "192.168.0.1", dstNS: "foo", port: 80, want: ReasonNotAllowed},
			},
		},
		{
			name: "principal wildcards: presence, prefix, suffix; never spiffe://",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: any-identity, namespace: any}
spec:
  rules: [{from: [{source: {principals: ["*"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: prefix, namespace: pre}
spec:
  rules: [{from: [{source: {principals: ["cluster.local/ns/foo/*"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: suffix, namespace: suf}
spec:
  rules: [{from: [{source: {principals: ["*/sa/sleep"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: with-scheme, namespace: scheme}
spec:
  rules: [{from: [{source: {principals: ["spiffe://cluster.local/ns/foo/sa/sleep"]}}]}]`,
			calls: []call{
				{from: "x/y", src: "10.0.1.1", dstNS: "any", port: 80, want: "allow"},
				{src: "10.0.1.1", dstNS: "any", port: 80, want: ReasonNotAllowed},
				{from: "foo/y", src: "10.0.1.1", dstNS: "pre", port: 80, want: "allow"},
				{from: "foobar/y", src: "10.0.1.1", dstNS: "pre", port: 80, want: ReasonNotAllowed},
				{from: "bar/sleep", src: "10.0.1.1", dstNS: "suf", port: 80, want: "allow"},
				{from: "bar/sleepy", src: "10.0.1.1", dstNS: "suf", port: 80, want: ReasonNotAllowed},
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "scheme", port: 80, want: ReasonNotAllowed},
			},
		},
		{
			name: "namespace wildcards and serviceAccounts",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ns, namespace: foo}
spec:
  rules:
  - from: [{source: {namespaces: ["team-*"]}}]
  - from: [{source: {serviceAccounts: ["sleep", "other/client"]}}]`,
			calls: []call{
				{from: "team-a/x", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
				{from: "foo/sleep", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
				{from: "bar/sleep", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonNotAllowed},
				{from: "other/client", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
			},
		},
		{
			// Root-namespace policies: without a selector they apply to
			// every workload; with one, to matching workloads anywhere.
			name: "root namespace scope",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: global-deny, namespace: istio-system}
spec:
  action: DENY
  rules: [{from: [{source: {namespaces: ["evil"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: db-allow, namespace: istio-system}
spec:
  selector: {matchLabels: {app: db}}
  rules: [{from: [{source: {namespaces: ["backend"]}}]}]`,
			calls: []call{
				{from: "evil/x", src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonDenied, policy: "istio-system/global-deny"},
				{from: "evil/x", src: "10.0.1.1", dstNS: "istio-system", port: 80, want: ReasonDenied},
				{from: "good/x", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
				{from: "backend/x", src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "db"}, port: 5432, want: "allow"},
				{from: "frontend/x", src: "10.0.1.1", dstNS: "bar", labels: map[string]string{"app": "db"}, port: 5432, want: ReasonNotAllowed},
			},
		},
		{
			name: "AUDIT, CUSTOM, targetRef and dry-run do not decide",
			policies: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: foo}
spec:
  action: AUDIT
  rules: [{}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: custom, namespace: foo}
spec:
  action: CUSTOM
  provider: {name: ext}
  rules: [{}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: waypoint, namespace: foo}
spec:
  targetRefs: [{kind: Service, group: "", name: svc}]
  action: DENY
  rules: [{}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: dry
  namespace: foo
  annotations: {istio.io/dry-run: "true"}
spec:
  action: DENY
  rules: [{}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: dry-allow-nothing
  namespace: foo
  annotations: {istio.io/dry-run: "true"}
spec: {}`,
			calls: []call{{from: "a/b", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := parse(t, tt.policies)
			for _, c := range tt.calls {
				c.check(t, s)
			}
		})
	}
}

func TestCheckDryRunReported(t *testing.T) {
	t.Parallel()
	s := parse(t, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: dry
  namespace: foo
  annotations: {istio.io/dry-run: "true"}
spec:
  action: DENY
  rules: [{}]`)
	d := s.Check(Conn{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddrPort("10.0.0.2:80")}, Workload{Namespace: "foo"})
	if !d.Allowed || len(d.DryRun) != 1 || d.DryRun[0] != "foo/dry" {
		t.Fatalf("decision = %+v, want allowed with dry-run match foo/dry", d)
	}
}

// https://istio.io/latest/docs/reference/config/security/peer_authentication/
// and https://istio.io/latest/docs/tasks/security/authentication/mtls-migration/
func TestCheckPeerAuthentication(t *testing.T) {
	t.Parallel()
	const meshStrict = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec:
  mtls: {mode: STRICT}
`
	tests := []struct {
		name     string
		policies string
		calls    []call
	}{
		{
			name:     "mesh-wide STRICT refuses plaintext, not mTLS",
			policies: meshStrict,
			calls: []call{
				{src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonStrict, policy: "istio-system/default"},
				{from: "a/b", src: "10.0.1.1", dstNS: "foo", port: 80, want: "allow"},
			},
		},
		{
			name: "namespace PERMISSIVE overrides mesh STRICT; UNSET inherits",
			policies: meshStrict + `---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: legacy}
spec:
  mtls: {mode: PERMISSIVE}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: unset, namespace: inherit}
spec: {}`,
			calls: []call{
				{src: "10.0.1.1", dstNS: "legacy", port: 80, want: "allow"},
				{src: "10.0.1.1", dstNS: "inherit", port: 80, want: ReasonStrict},
			},
		},
		{
			// The reference's example: namespace STRICT, port 8080 of the
			// finance workload PERMISSIVE... here DISABLE, the same in ambient.
			name: "workload selector and portLevelMtls",
			policies: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: foo}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: finance, namespace: foo}
spec:
  selector: {matchLabels: {app: finance}}
  portLevelMtls:
    "8080": {mode: DISABLE}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: strict-db, namespace: bar}
spec:
  selector: {matchLabels: {app: db}}
  mtls: {mode: STRICT}`,
			calls: []call{
				{src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "finance"}, port: 8080, want: "allow"},
				{src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "finance"}, port: 80, want: ReasonStrict, policy: "foo/default"},
				{src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "other"}, port: 8080, want: ReasonStrict},
				{src: "10.0.1.1", dstNS: "bar", labels: map[string]string{"app": "db"}, port: 5432, want: ReasonStrict, policy: "bar/strict-db"},
				{src: "10.0.1.1", dstNS: "bar", labels: map[string]string{"app": "web"}, port: 80, want: "allow"},
			},
		},
		{
			name: "the oldest namespace-wide policy wins",
			policies: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: newer, namespace: foo, creationTimestamp: "2025-02-01T00:00:00Z"}
spec:
  mtls: {mode: PERMISSIVE}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: older, namespace: foo, creationTimestamp: "2025-01-01T00:00:00Z"}
spec:
  mtls: {mode: STRICT}`,
			calls: []call{{src: "10.0.1.1", dstNS: "foo", port: 80, want: ReasonStrict, policy: "foo/older"}},
		},
		{
			name: "a selector PeerAuthentication in the root namespace is not mesh-wide",
			policies: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: sel, namespace: istio-system}
spec:
  selector: {matchLabels: {app: x}}
  mtls: {mode: STRICT}`,
			calls: []call{{src: "10.0.1.1", dstNS: "foo", labels: map[string]string{"app": "x"}, port: 80, want: "allow"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := parse(t, tt.policies)
			for _, c := range tt.calls {
				c.check(t, s)
			}
		})
	}
}

// TestCheckBoundPolicies: from istiod a selector policy comes without its
// selector (Scope WorkloadSelector, Selector nil) and applies only to the
// workloads istiod names it in, as ztunnel's assert_rbac does; and istiod's
// stand-in for STRICT denies with the reason STRICT has here.
func TestCheckBoundPolicies(t *testing.T) {
	t.Parallel()
	allowA := &Authorization{Name: "allow-a", Namespace: "foo", Scope: ScopeWorkloadSelector, Action: Allow,
		Rules: [][][]Match{{{{Principals: []StringMatch{{Kind: Exact, Value: "cluster.local/ns/a/sa/a"}}}}}}}
	strict := StaticStrict(ambient.DefaultRootNamespace)
	s := NewSnapshot("", []*Authorization{allowA, strict}, nil)
	conn := func(ns string) Conn {
		c := Conn{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddrPort("10.0.2.9:80")}
		if ns != "" {
			c.Peer = identity.New("cluster.local", ns, ns)
		}
		return c
	}
	bound := Workload{Namespace: "foo", Policies: []string{"foo/allow-a", "istio-system/" + StaticStrictPolicyName, "foo/not-sent-yet"}}
	for _, tc := range []struct {
		name string
		w    Workload
		c    Conn
		want string
	}{
		{"bound, allowed principal", bound, conn("a"), "allow"},
		{"bound, other principal", bound, conn("b"), ReasonNotAllowed},
		{"bound STRICT, plaintext", bound, conn(""), ReasonStrict},
		{"same namespace, not bound", Workload{Namespace: "foo"}, conn("b"), "allow"},
		{"not bound, plaintext", Workload{Namespace: "foo"}, conn(""), "allow"},
	} {
		d := s.Check(tc.c, tc.w)
		got := "allow"
		if !d.Allowed {
			got = d.Reason
		}
		if got != tc.want {
			t.Errorf("%s: %s (%+v), want %s", tc.name, got, d, tc.want)
		}
	}
}
