package routes

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// scriptedSource returns one status after another, repeating the last.
type scriptedSource struct {
	mu    sync.Mutex
	steps []*cluster.StatusResult
	calls int
}

func (s *scriptedSource) Status(context.Context, string, string) (*cluster.StatusResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := min(s.calls, len(s.steps)-1)
	s.calls++
	return s.steps[i], nil
}

type recordingExec struct {
	mu    sync.Mutex
	calls map[string]string
}

func (r *recordingExec) Exec(_ context.Context, c, node string, stdin []byte, argv ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[c+"/"+node+" "+argv[0]] = strings.Join(argv, " ") + "\n" + string(stdin)
	return nil
}

func status(withWorkerCIDR bool) *cluster.StatusResult {
	worker := cluster.NodeStatus{Name: "c2-worker", Role: "worker", IPs: []string{"172.18.0.4"}}
	if withWorkerCIDR {
		worker.PodCIDRs = []string{"10.20.1.0/24"}
	}
	return &cluster.StatusResult{Env: "e", Clusters: []cluster.ClusterStatus{
		{ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "c1", KindName: "e-c1", Network: "n1", ServiceSubnets: []string{"10.255.10.0/24"}}},
			Nodes: []cluster.NodeStatus{{Name: "c1-control-plane", Role: "control-plane", IPs: []string{"172.18.0.2"}, PodCIDRs: []string{"10.10.0.0/24"}}}},
		{ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "c2", KindName: "e-c2", Network: "n1", ServiceSubnets: []string{"10.255.20.0/24"}}},
			Nodes: []cluster.NodeStatus{{Name: "c2-control-plane", Role: "control-plane", IPs: []string{"172.18.0.3"}, PodCIDRs: []string{"10.20.0.0/24"}}, worker}},
	}}
}

func TestConnectWaitsForPodCIDRsThenAppliesOneBatchPerNode(t *testing.T) {
	t.Parallel()
	src := &scriptedSource{steps: []*cluster.StatusResult{status(false), status(true)}}
	x := &recordingExec{calls: map[string]string{}}
	c := New(x, src, WithTimeout(time.Minute))
	c.poll = time.Millisecond
	res, err := c.Connect(context.Background(), "e")
	if err != nil {
		t.Fatal(err)
	}
	if src.calls != 2 || len(x.calls) != 3 || len(res.Nodes) != 3 {
		t.Fatalf("status calls %d, execs %v", src.calls, x.calls)
	}
	// One command per node: the routes as one batch, then the same routes
	// by peer node name, for the reconciler that follows the peers when
	// their addresses change.
	got := x.calls["e-c1/c1-control-plane sh"]
	batch := "ip -batch - <<'MESHCTL_EOF' || { echo \"adding 3 routes failed\" >&2; exit 3; }\nroute replace 10.20.0.0/24 via 172.18.0.3\nroute replace 10.20.1.0/24 via 172.18.0.4\nroute replace 10.255.20.0/24 via 172.18.0.3\nMESHCTL_EOF\n"
	if !strings.HasPrefix(got, "sh -s\n"+batch) {
		t.Errorf("c1 script does not begin with its batch:\n%s\nwant\n%s", got, batch)
	}
	byName := "10.20.0.0/24 c2-control-plane\n10.20.1.0/24 c2-worker\n10.255.20.0/24 c2-control-plane\n"
	if !strings.Contains(got, byName) || !strings.Contains(got, "systemctl restart meshctl-routes.service") {
		t.Errorf("c1 reconciler install:\n%s", got)
	}
}

func TestConnectGivesUpNamingTheNode(t *testing.T) {
	t.Parallel()
	x := &recordingExec{calls: map[string]string{}}
	c := New(x, &scriptedSource{steps: []*cluster.StatusResult{status(false)}}, WithTimeout(10*time.Millisecond))
	c.poll = time.Millisecond
	_, err := c.Connect(context.Background(), "e")
	if err == nil || !strings.Contains(err.Error(), `cluster "e-c2": node c2-worker has no podCIDR yet`) {
		t.Fatalf("error %v", err)
	}
	if len(x.calls) != 0 {
		t.Errorf("half-applied: %v", x.calls)
	}
	_, err = New(x, &scriptedSource{steps: []*cluster.StatusResult{{Env: "none"}}}).Connect(context.Background(), "none")
	if err == nil || !strings.Contains(err.Error(), "has no clusters") {
		t.Errorf("empty env: %v", err)
	}
}
