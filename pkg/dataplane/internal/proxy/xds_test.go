package proxy

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/xds"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// TestXDSFeedsTheEnforcedPolicyStore: with WithXDS the proxy's model and
// policy store are the ones the XDS source feeds, and inbound
// authorization selects the policies istiod bound to the destination
// workload (WDS carries no labels).
func TestXDSFeedsTheEnforcedPolicyStore(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("proxy")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(
		WithFetcher(certs.FromCA(c, time.Hour, time.Now)),
		WithXDS(XDS{Address: "istiod.istio-system.svc:15012", Cluster: "c1",
			Roots: func() ([]byte, error) { return nil, nil }, Token: func() (string, error) { return "", nil }}),
	)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.source.(*xds.Source); !ok || p.model == nil || p.policies == nil {
		t.Fatalf("source %T, model %v, policies %v", p.source, p.model, p.policies)
	}
	// What the XDS source would feed: a workload istiod bound a selector
	// policy to, and that policy without its selector.
	p.model.UpsertWorkload(model.Workload{UID: "c1//Pod/ns-b/server", Name: "server", Namespace: "ns-b", ServiceAccount: "sa-b",
		TrustDomain: "cluster.local", Cluster: "c1", IPs: []netip.Addr{netip.MustParseAddr("10.2.0.5")}, Ready: true, HBONE: true,
		AuthorizationPolicies: []string{"ns-b/allow-a"}})
	p.policies.SetAuthorization("ns-b/allow-a", &policy.Authorization{Name: "allow-a", Namespace: "ns-b",
		Scope: policy.ScopeWorkloadSelector, Action: policy.Allow,
		Rules: [][][]policy.Match{{{{Principals: []policy.StringMatch{{Kind: policy.Exact, Value: "cluster.local/ns/ns-a/sa/sa-a"}}}}}}})
	w := &workload{namespace: "ns-b"}
	src, dst := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddrPort("10.2.0.5:8080")
	if err := p.authorize(w, "hbone", identity.New("cluster.local", "ns-a", "sa-a"), src, dst); err != nil {
		t.Fatalf("allowed principal: %v", err)
	}
	if err := p.authorize(w, "hbone", identity.New("cluster.local", "ns-c", "sa-c"), src, dst); err == nil || !strings.Contains(err.Error(), policy.ReasonNotAllowed) {
		t.Fatalf("other principal: %v", err)
	}
	if got := p.Dump().Policies; len(got) != 1 {
		t.Fatalf("config_dump policies %v", got)
	}

	if _, err := New(WithFetcher(certs.FromCA(c, time.Hour, time.Now)), WithDiscovery(Discovery{}),
		WithXDS(XDS{Address: "istiod:15012"})); err == nil || !strings.Contains(err.Error(), "one source") {
		t.Fatalf("two sources: %v", err)
	}
}
