package cluster

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/version"
)

// upEnv creates a planned environment on the fakes and returns its plan.
func upEnv(t *testing.T, e *env, req model.Request) *model.Plan {
	t.Helper()
	plan := mustPlan(t, req)
	if _, err := e.p.Up(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

func stopNode(t *testing.T, e *env, kindName string, i int) *fakeNode {
	t.Helper()
	c, ok := e.kind.cluster(kindName)
	if !ok {
		t.Fatalf("no kind cluster %s", kindName)
	}
	n := c.nodes[i]
	n.mu.Lock()
	n.stopped = true
	n.mu.Unlock()
	return n
}

func clusterByName(t *testing.T, st *StatusResult, name string) ClusterStatus {
	t.Helper()
	for _, c := range st.Clusters {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("status leaves out cluster %q: %+v", name, st.Clusters)
	return ClusterStatus{}
}

// `docker stop cluster2-control-plane`: status used to leave cluster2 out
// and call the environment Ready.
func TestStatusReportsAStoppedClusterAndDegraded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	upEnv(t, e, model.Request{Clusters: 3})
	stopNode(t, e, "cluster2", 0)
	st, err := e.p.Status(context.Background(), "default", "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready || st.State != EnvDegraded {
		t.Errorf("environment ready %v state %q, want Degraded", st.Ready, st.State)
	}
	c := clusterByName(t, st, "cluster2")
	if c.State != StateStopped || c.Ready || len(c.Problems) == 0 || !strings.Contains(c.Problems[0], "cluster2-control-plane") {
		t.Errorf("cluster2: state %q problems %q", c.State, c.Problems)
	}
	if c := clusterByName(t, st, "cluster1"); c.State != StateRunning || !c.Ready {
		t.Errorf("cluster1: state %q", c.State)
	}
	if len(st.Problems) != 1 || !strings.Contains(st.Problems[0], `cluster "cluster2"`) {
		t.Errorf("problems %q", st.Problems)
	}
	// The same truth reaches every command that reads the environment.
	cs, err := e.p.Environment(context.Background(), "default")
	if err != nil || len(cs) != 3 {
		t.Errorf("Environment: %d clusters (%v), want 3", len(cs), err)
	}
}

// A worker stopped while the control plane runs is a stopped cluster too.
func TestStatusReportsAStoppedWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	upEnv(t, e, model.Request{Clusters: 1, Workers: 1})
	stopNode(t, e, "cluster1", 1)
	st, err := e.p.Status(context.Background(), "default", "")
	if err != nil {
		t.Fatal(err)
	}
	if c := clusterByName(t, st, "cluster1"); c.State != StateStopped || !strings.Contains(c.Problems[0], "cluster1-worker") {
		t.Errorf("state %q problems %q", c.State, c.Problems)
	}
}

func TestStatusReportsNotReadyMissingAndStaleRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	upEnv(t, e, model.Request{Clusters: 3})
	e.kind.mu.Lock()
	e.kind.apiDown = map[string]bool{"cluster1": true}
	e.kind.mu.Unlock()
	_ = e.kind.Delete("cluster2", "") // behind meshctl's back
	c3, _ := e.kind.cluster("cluster3")
	c3.nodes[0].staleRoutes = "10.10.0.0/24 via 172.18.0.9, cluster1-control-plane is at 172.18.0.2\n"

	st, err := e.p.Status(context.Background(), "default", "")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != EnvDegraded {
		t.Errorf("state %q", st.State)
	}
	for name, want := range map[string]string{"cluster1": StateNotReady, "cluster2": StateMissing, "cluster3": StateRoutesStale} {
		c := clusterByName(t, st, name)
		if c.State != want || c.Ready || len(c.Problems) == 0 {
			t.Errorf("%s: state %q problems %q, want %q", name, c.State, c.Problems, want)
		}
	}
	if c := clusterByName(t, st, "cluster3"); !strings.Contains(c.Problems[0], "cluster3-control-plane: 10.10.0.0/24 via 172.18.0.9") {
		t.Errorf("cluster3 problems %q", c.Problems)
	}
}

// A caller that reads the status for its nodes alone (connect's route
// plan, the image step) does not have the routes checked: no command runs
// on the nodes for it, and stale routes do not make the cluster unready.
func TestStatusWithoutRouteCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	upEnv(t, e, model.Request{Clusters: 1})
	c1, _ := e.kind.cluster("cluster1")
	c1.nodes[0].staleRoutes = "10.10.0.0/24 via 172.18.0.9, cluster2-control-plane is at 172.18.0.3\n"

	st, err := e.p.Status(WithoutRouteCheck(context.Background()), "default", "")
	if err != nil {
		t.Fatal(err)
	}
	if c := clusterByName(t, st, "cluster1"); c.State != StateRunning || !c.Ready {
		t.Errorf("without the route check: state %q problems %q, want running", c.State, c.Problems)
	}
	st, err = e.p.Status(context.Background(), "default", "")
	if err != nil {
		t.Fatal(err)
	}
	if c := clusterByName(t, st, "cluster1"); c.State != StateRoutesStale {
		t.Errorf("with it: state %q, want %q", c.State, StateRoutesStale)
	}
}

// Docker unreachable: every command that lists clusters says what up says.
func TestDockerUnreachableSaysHowToStartIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.docker.down = true
	e.kind.listErr = errors.New("command \"docker ps -a --filter label=io.x-k8s.kind.cluster\" failed with error: exit status 1")
	_, upErr := e.p.Up(context.Background(), mustPlan(t, model.Request{Clusters: 1}))
	_, statusErr := e.p.Status(context.Background(), "default", "")
	_, downErr := e.p.Down(context.Background(), "default")
	_, listErr := e.p.List(context.Background())
	for name, err := range map[string]error{"up": upErr, "status": statusErr, "down": downErr, "list": listErr} {
		if !errors.Is(err, ErrNoDocker) || !strings.Contains(err.Error(), "systemctl start docker") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestUpHealsAStoppedCluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := upEnv(t, e, model.Request{Clusters: 2, Workers: 1})
	cp := stopNode(t, e, "cluster2", 0)
	w := stopNode(t, e, "cluster2", 1)
	res, err := e.p.Up(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	if cp.stopped || w.stopped {
		t.Errorf("nodes still stopped")
	}
	for _, c := range res.Clusters {
		want := map[string]string{"cluster1": ActionReused, "cluster2": ActionHealed}[c.Name]
		if c.Action != want {
			t.Errorf("%s: action %q, want %q", c.Name, c.Action, want)
		}
	}
	if h := res.Clusters[1].Healed; len(h) != 1 || !strings.Contains(h[0], "started cluster2-control-plane, cluster2-worker") {
		t.Errorf("healed %q", h)
	}
	if len(e.kind.created) != 2 || len(e.kind.deleted) != 0 {
		t.Errorf("created %v deleted %v: healing must not recreate", e.kind.created, e.kind.deleted)
	}
}

// A restarted node answers and reports itself Ready long before CoreDNS
// (measured: 8 s against 40 s): status must not call that Ready, and up
// waits for it.
func TestStatusAndUpWaitForSystemPods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := upEnv(t, e, model.Request{Clusters: 2})
	e.kind.mu.Lock()
	e.kind.systemNotReady = map[string][]string{"cluster2": {"Deployment kube-system/coredns: none of 2 pods ready"}}
	e.kind.mu.Unlock()
	st, err := e.p.Status(context.Background(), "default", "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready || st.State != EnvDegraded {
		t.Errorf("environment ready %v state %q, want Degraded", st.Ready, st.State)
	}
	c := clusterByName(t, st, "cluster2")
	if c.State != StateNotReady || c.Ready || len(c.Problems) != 1 || !strings.Contains(c.Problems[0], "system pods not ready: Deployment kube-system/coredns") {
		t.Errorf("cluster2: state %q problems %q", c.State, c.Problems)
	}
	if c := clusterByName(t, st, "cluster1"); !c.Ready {
		t.Errorf("cluster1: state %q problems %q", c.State, c.Problems)
	}

	// up waits for it (ready after two more reads) and says what it found.
	e.kind.mu.Lock()
	e.kind.systemReadyAfter = map[string]int{"cluster2": 2}
	e.kind.mu.Unlock()
	e.p.poll = time.Millisecond
	res, err := e.p.Up(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Clusters[1]; c.Action != ActionHealed || len(c.Healed) != 1 || !strings.Contains(c.Healed[0], "was not ready: system pods not ready") {
		t.Errorf("cluster2: %+v", c)
	}
	if st, err := e.p.Status(context.Background(), "default", ""); err != nil || !st.Ready {
		t.Errorf("after up: ready %v (%v)", st.Ready, err)
	}
}

func TestUpHealsStaleRoutesAndSaysSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := upEnv(t, e, model.Request{Clusters: 2})
	c1, _ := e.kind.cluster("cluster1")
	c1.nodes[0].staleRoutes = "10.20.0.0/24 via 172.18.0.9, cluster2-control-plane is at 172.18.0.3\n"
	res, err := e.p.Up(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Clusters[0]; c.Action != ActionHealed || len(c.Healed) != 1 || !strings.Contains(c.Healed[0], "routes stale") {
		t.Errorf("cluster1: %+v", c)
	}
}

// killedCreation leaves what a SIGKILLed `up` leaves: meshctl's local
// in-progress record and a kind cluster with no record on its node.
func killedCreation(t *testing.T, e *env, plan *model.Plan, i int) {
	t.Helper()
	c := plan.Clusters[i]
	if err := e.p.writeLocalRecord(model.Record{Env: plan.Env, Cluster: model.ClusterState{ClusterPlan: c}, Version: version.String()}, true); err != nil {
		t.Fatal(err)
	}
	e.kind.add(c.KindName, plan.KindConfig(c))
}

func TestUpRecreatesAClusterWhoseCreationWasKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := mustPlan(t, model.Request{Env: "x", Clusters: 2})
	killedCreation(t, e, plan, 1)

	st, err := e.p.Status(context.Background(), "x", "")
	if err != nil {
		t.Fatal(err)
	}
	if c := clusterByName(t, st, "cluster2"); c.State != StateIncomplete {
		t.Errorf("status: cluster2 state %q", c.State)
	}
	// Without --recreate.
	res, err := e.p.Up(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Clusters[1]; c.Action != ActionRecreated || len(c.Healed) != 1 {
		t.Errorf("cluster2: %+v", c)
	}
	if _, err := e.p.readRecord("x-cluster2"); err != nil {
		t.Errorf("recreated cluster has no record: %v", err)
	}
}

func TestDownDeletesAClusterWhoseCreationWasKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := mustPlan(t, model.Request{Env: "x", Clusters: 1})
	killedCreation(t, e, plan, 0)
	res, err := e.p.Down(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deleted) != 1 || res.Deleted[0] != "x-cluster1" {
		t.Errorf("deleted %v", res.Deleted)
	}
	if _, ok := e.kind.cluster("x-cluster1"); ok {
		t.Error("kind cluster x-cluster1 is still there")
	}
	if _, err := os.Stat(e.p.localRecordPath("x", "cluster1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("local record left behind: %v", err)
	}
}

// A kind cluster without meshctl's record and without its in-progress
// marker is someone else's: never recreated without --recreate.
func TestUpStillRefusesAForeignKindCluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := mustPlan(t, model.Request{Clusters: 1})
	e.kind.add("cluster1", plan.KindConfig(plan.Clusters[0]))
	_, err := e.p.Up(context.Background(), plan)
	if err == nil || !strings.Contains(err.Error(), "not created by meshctl") {
		t.Fatalf("err %v", err)
	}
	res, err := e.p.Down(context.Background(), "default")
	if err != nil || len(res.Deleted) != 0 {
		t.Errorf("down deleted %v (%v): a foreign cluster must stay", res.Deleted, err)
	}
}

// A killed run whose kind cluster another environment's up would see as
// foreign: the marker belongs to env x only.
func TestKilledCreationIsOnlyItsOwnEnvironments(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := mustPlan(t, model.Request{Env: "x", Clusters: 1, NamePrefix: ptr("shared-")})
	killedCreation(t, e, plan, 0)
	other := mustPlan(t, model.Request{Env: "y", Clusters: 1, NamePrefix: ptr("shared-")})
	if _, err := e.p.Up(context.Background(), other); err == nil {
		t.Fatal("env y recreated env x's cluster")
	}
	if res, err := e.p.Down(context.Background(), "y"); err != nil || len(res.Deleted) != 0 {
		t.Errorf("down y deleted %v (%v)", res.Deleted, err)
	}
}

// A new cluster's creation waits for its nodes alone, so that CoreDNS
// turns ready during the steps after it; WaitSystem, which up calls last,
// waits for it.
func TestUpWaitsForNewClustersSystemPodsLast(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.p.poll = time.Millisecond
	e.kind.systemNotReady = map[string][]string{"cluster1": {"Deployment kube-system/coredns: none of 2 pods ready"}}
	e.kind.systemReadyAfter = map[string]int{"cluster1": 3}
	plan := mustPlan(t, model.Request{Clusters: 1})
	res, err := e.p.Up(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	e.kind.mu.Lock()
	reads := e.kind.systemReadyAfter["cluster1"]
	e.kind.mu.Unlock()
	if reads != 3 {
		t.Errorf("creation read kube-system's workloads %d times, want none", 3-reads)
	}
	if st, err := e.p.Status(context.Background(), "default", ""); err != nil || st.Ready {
		t.Errorf("before WaitSystem: ready %v (%v), want not ready", st.Ready, err)
	}
	if err := e.p.WaitSystem(context.Background(), plan, res); err != nil {
		t.Fatal(err)
	}
	if st, err := e.p.Status(context.Background(), "default", ""); err != nil || !st.Ready {
		t.Errorf("after WaitSystem: ready %v (%v)", st.Ready, err)
	}
}

// A problem found beyond a cluster's own health (pkg/mesh's remote
// secrets) is reported as the cluster's own are: the cluster not Ready, in
// the given state unless it has one of its own, the environment Degraded
// with its problems in cluster order.
func TestAddProblems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	upEnv(t, e, model.Request{Clusters: 3})
	stopNode(t, e, "cluster3", 0)
	st, err := e.p.Status(context.Background(), "default", "")
	if err != nil {
		t.Fatal(err)
	}
	st.AddProblems("cluster9", StateRemoteSecretsStale, "not a cluster of the environment")
	st.AddProblems("cluster3", StateRemoteSecretsStale, "secret C")
	st.AddProblems("cluster1", StateRemoteSecretsStale, "secret A", "secret B")
	st.AddProblems("cluster2", StateRemoteSecretsStale)
	for name, want := range map[string]string{"cluster1": StateRemoteSecretsStale, "cluster2": StateRunning, "cluster3": StateStopped} {
		if c := clusterByName(t, st, name); c.State != want || c.Ready != (want == StateRunning) {
			t.Errorf("%s: state %q ready %v, want %q", name, c.State, c.Ready, want)
		}
	}
	got := strings.Join(st.Problems, "\n")
	want := "cluster \"cluster1\": secret A\ncluster \"cluster1\": secret B\ncluster \"cluster3\": node containers not running: cluster3-control-plane (`meshctl up` starts them)\ncluster \"cluster3\": secret C"
	if st.Ready || st.State != EnvDegraded || got != want {
		t.Errorf("environment ready %v state %q problems:\n%s\nwant\n%s", st.Ready, st.State, got, want)
	}
}
