package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/podnet"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
)

// try is talk without failing the test: a refused connection is an error.
func (e *twoNodes) try(ns, addr string) (string, error) {
	n, err := podnet.Open("/var/run/netns/" + ns)
	if err != nil {
		return "", err
	}
	defer n.Close()
	dctx, dcancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer dcancel()
	conn, err := n.DialContext(dctx, &net.Dialer{}, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, "over hbone")
	_ = conn.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(conn)
	if err == nil && len(got) == 0 {
		err = io.ErrUnexpectedEOF // closed without an answer
	}
	return string(got), err
}

// labelledValue reads a counter whose labels include want.
func labelledValue(t *testing.T, p *Proxy, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestIntegrationPolicyEnforced: on the two-node topology, a DENY policy
// for pod B's namespace makes pod A's tunnel get 401 (the client sees its
// connection reset); removing it lets the same call through. A mesh-wide
// STRICT PeerAuthentication then refuses the router's plaintext on pod B's
// 15006, while pod A, over mTLS, still gets through.
func TestIntegrationPolicyEnforced(t *testing.T) {
	store := policy.NewStore("")
	e := newTwoNodes(t, func(o *options) { o.policies = store })

	if got, err := e.try(e.podA, "10.200.2.2:8080"); err != nil || got != "10.200.1.2\nover hbone" {
		t.Fatalf("before any policy: %q, %v", got, err)
	}

	store.SetAuthorization("ns-b/deny-ns-a", &policy.Authorization{
		Name: "deny-ns-a", Namespace: "ns-b", Scope: policy.ScopeNamespace, Action: policy.Deny,
		Rules: [][][]policy.Match{{{{Namespaces: []policy.StringMatch{policy.ParseStringMatch("ns-a")}}}}},
	})
	if got, err := e.try(e.podA, "10.200.2.2:8080"); err == nil {
		t.Fatalf("pod a → pod b under a DENY policy got through: %q", got)
	}
	if n := labelledValue(t, e.proxyB, "meshctl_hbone_inbound_rejects_total", map[string]string{"code": "401", "reason": "denied"}); n != 1 {
		t.Errorf("proxy B 401 rejects = %v, want 1", n)
	}
	if n := labelledValue(t, e.proxyB, "meshctl_proxy_policy_denied_total", map[string]string{"transport": "hbone", "reason": "denied", "policy": "ns-b/deny-ns-a"}); n != 1 {
		t.Errorf("proxy B policy denials = %v, want 1", n)
	}
	dump, err := json.Marshal(e.proxyB.Dump().Policies)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dump), `"name":"deny-ns-a","namespace":"ns-b","scope":"Namespace","action":"Deny"`) {
		t.Errorf("config_dump policies = %s", dump)
	}
	// The DENY does not reach plaintext from the router (no namespace).
	if got, err := e.try(e.router, "10.200.2.2:8080"); err != nil || got != "10.200.2.1\nover hbone" {
		t.Fatalf("router → pod b: %q, %v", got, err)
	}

	store.SetAuthorization("ns-b/deny-ns-a", nil)
	if got, err := e.try(e.podA, "10.200.2.2:8080"); err != nil || got != "10.200.1.2\nover hbone" {
		t.Fatalf("pod a → pod b after the policy was removed: %q, %v", got, err)
	}

	store.SetPeerAuthentication("istio-system/default", &policy.PeerAuthentication{Name: "default", Namespace: "istio-system", Mode: policy.ModeStrict})
	if got, err := e.try(e.router, "10.200.2.2:8080"); err == nil {
		t.Fatalf("router → pod b plaintext under STRICT got through: %q", got)
	}
	if got, err := e.try(e.router, "[fd00:200:2::2]:8080"); err == nil {
		t.Fatalf("router → pod b plaintext over IPv6 under STRICT got through: %q", got)
	}
	if n := labelledValue(t, e.proxyB, "meshctl_proxy_policy_denied_total", map[string]string{"transport": "plaintext", "reason": "strict", "policy": "istio-system/default"}); n != 2 {
		t.Errorf("proxy B STRICT denials = %v, want 2", n)
	}
	if n := metricValue(t, e.proxyB, "meshctl_hbone_connections_opened_total", "inbound_plaintext"); n != 1 {
		t.Errorf("proxy B inbound plaintext connections = %v, want 1 (only the one before STRICT)", n)
	}
	if got, err := e.try(e.podA, "10.200.2.2:8080"); err != nil || got != "10.200.1.2\nover hbone" {
		t.Fatalf("pod a → pod b over mTLS under STRICT: %q, %v", got, err)
	}
}
