package check

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// partialEnv is an environment of two clusters: one missing (its
// kubeconfig cannot be read), one whose API server refuses connections.
type partialEnv struct{ server string }

func (partialEnv) Environment(context.Context, string) ([]model.ClusterState, error) {
	return []model.ClusterState{
		{ClusterPlan: model.ClusterPlan{Name: "c1", KindName: "c1", Network: "network-1"}},
		{ClusterPlan: model.ClusterPlan{Name: "c2", KindName: "c2", Network: "network-1"}},
	}, nil
}

func (s partialEnv) ClusterKubeconfig(_ context.Context, c model.ClusterPlan, _ bool) ([]byte, error) {
	if c.Name == "c1" {
		return nil, fmt.Errorf("cluster %q: reading kubeconfig: kind cluster c1 does not exist", c.Name)
	}
	return []byte(`apiVersion: v1
kind: Config
clusters: [{name: c2, cluster: {server: "` + s.server + `"}}]
contexts: [{name: c2, context: {cluster: c2, user: c2}}]
users: [{name: c2, user: {token: x}}]
current-context: c2
`), nil
}

// A planned cluster the check cannot reach is a failed probe, named: the
// check used to stop at the first one (or, before status read stopped
// clusters, to pass without them).
func TestUnreachableClustersAreFailedProbes(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now: connection refused
	res, err := New(partialEnv{server: "https://" + addr}).Check(context.Background(), "e")
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || len(res.Failed()) != 2 {
		t.Fatalf("ok %v, probes %+v", res.OK, res.Probes)
	}
	for i, want := range []string{"kind cluster c1 does not exist", "API server unreachable at https://" + addr} {
		p := res.Probes[i]
		if p.From != FromMeshctl || p.To != fmt.Sprintf("c%d", i+1) || p.Path != PathAPI || !strings.Contains(p.Error, want) {
			t.Errorf("probe %d: %+v, want one naming %q", i, p, want)
		}
	}
}
