package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshctl/meshctl/pkg/cluster/internal/nodeboot"
	"github.com/meshctl/meshctl/pkg/cluster/internal/records"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

type env struct {
	kind   *fakeKind
	docker *fakeDocker
	p      *Provider
	dir    string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{kind: newFakeKind(), dir: t.TempDir()}
	e.docker = &fakeDocker{kind: e.kind}
	e.p = NewProvider(ProviderWithKind(e.kind), ProviderWithDocker(e.docker),
		ProviderWithNodeReader(fakeNodeReader{e.kind}), ProviderWithArtifacts(e.dir))
	return e
}

func mustPlan(t *testing.T, req model.Request) *model.Plan {
	t.Helper()
	p, err := model.NewPlan(req)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// barrier makes every Create wait until n have started: Up passes only if it
// really creates the clusters concurrently. The timeout only guards against
// a deadlock when it does not.
func barrier(n int) func(string) error {
	var mu sync.Mutex
	started := 0
	all := make(chan struct{})
	return func(name string) error {
		mu.Lock()
		started++
		if started == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("%s: created alone: clusters are not created in parallel", name)
		}
	}
}

func TestUpCreatesClustersInParallel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind.createHook = barrier(3)
	plan := mustPlan(t, model.Request{Clusters: 3, Workers: 1, Registry: model.Registry{Enabled: true}})
	res, err := e.p.Up(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.kind.created) != 3 || res.Registry == nil || res.Registry.Action != ActionCreated {
		t.Fatalf("created %v, registry %+v", e.kind.created, res.Registry)
	}
	for i, c := range res.Clusters {
		if c.Action != ActionCreated {
			t.Errorf("%s: action %s", c.Name, c.Action)
		}
		fc, _ := e.kind.cluster(c.KindName)
		if len(fc.nodes) != 2 {
			t.Errorf("%s: %d nodes, want 2", c.Name, len(fc.nodes))
		}
		// The record of the plan lives on the control-plane node.
		var rec model.Record
		raw, _ := fc.nodes[0].file(records.NodePath)
		if err := json.Unmarshal(raw, &rec); err != nil || rec.Env != "default" || len(model.Diff(rec.Cluster.ClusterPlan, plan.Clusters[i])) != 0 {
			t.Errorf("%s: record %s (%v)", c.Name, raw, err)
		}
		// Every node pulls localhost:5000 from the registry container,
		// and got the boot unit with its pods' and Services' subnets.
		pair := plan.Clusters[i].PodSubnets[0] + "=" + plan.Clusters[i].ServiceSubnets[0]
		for _, n := range fc.nodes {
			if boot, _ := n.file(bootInstalled); !strings.Contains(string(boot), nodeboot.ScriptPath+" rules "+pair+"\n") {
				t.Errorf("%s: boot unit install %q, want the rules for %s", n.name, boot, pair)
			}
			hosts, ok := n.file("/etc/containerd/certs.d/localhost:5000/hosts.toml")
			if !ok || string(hosts) != "[host.\"http://kind-registry:5000\"]\n" {
				t.Errorf("%s: hosts.toml %q", n.name, hosts)
			}
		}
		if len(fc.applied) != 1 || !strings.Contains(fc.applied[0], "local-registry-hosting") {
			t.Errorf("%s: applied %q", c.Name, fc.applied)
		}
		checkKubeconfig(t, c.Kubeconfig, c.Name, "https://127.0.0.1:40001")
		checkKubeconfig(t, c.InternalKubeconfig, c.Name, "https://"+fc.nodes[0].ip+":6443")
	}
}

func checkKubeconfig(t *testing.T, path, name, server string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", path, st.Mode().Perm())
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != name || cfg.Clusters[name] == nil || cfg.Clusters[name].Server != server || cfg.AuthInfos[name] == nil {
		t.Errorf("%s: context %q, clusters %v", path, cfg.CurrentContext, cfg.Clusters)
	}
}

func TestUpRerunIsNoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := mustPlan(t, model.Request{Clusters: 2, Registry: model.Registry{Enabled: true}})
	if _, err := e.p.Up(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	runs := e.docker.called("run ")
	res, err := e.p.Up(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.kind.created) != 2 || e.docker.called("run ") != runs || res.Registry.Action != ActionReused {
		t.Errorf("rerun created %v, registry %+v", e.kind.created, res.Registry)
	}
	for _, c := range res.Clusters {
		if c.Action != ActionReused {
			t.Errorf("%s: action %s, want reused", c.Name, c.Action)
		}
	}
}

func TestUpDifferentPlanIsAnErrorUnlessRecreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.p.Up(context.Background(), mustPlan(t, model.Request{Clusters: 2})); err != nil {
		t.Fatal(err)
	}
	changed := mustPlan(t, model.Request{Clusters: 2, Workers: 1, Networks: 2})
	_, err := e.p.Up(context.Background(), changed)
	if err == nil {
		t.Fatal("a different plan was accepted")
	}
	for _, w := range []string{`cluster "cluster1"`, "workers: 0 → 1", `cluster "cluster2"`, "network: network-1 → network-2", "--recreate"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if len(e.kind.deleted) != 0 || len(e.kind.created) != 2 {
		t.Fatalf("a refused plan changed things: deleted %v created %v", e.kind.deleted, e.kind.created)
	}
	res, err := e.p.Up(context.Background(), changed, UpWithRecreate(true))
	if err != nil {
		t.Fatal(err)
	}
	if res.Clusters[0].Action != ActionRecreated || len(e.kind.deleted) != 2 || len(e.kind.created) != 4 {
		t.Errorf("recreate: %+v deleted %v", res.Clusters, e.kind.deleted)
	}
	fc, _ := e.kind.cluster("cluster2")
	if len(fc.nodes) != 2 {
		t.Errorf("recreated cluster2 has %d nodes", len(fc.nodes))
	}
}

func TestUpFailureExportsLogsAndDeletesWhatItCreated(t *testing.T) {
	t.Parallel()
	for _, retain := range []bool{false, true} {
		t.Run(fmt.Sprintf("retain=%v", retain), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			// cluster1 exists already and must survive a failed run.
			if _, err := e.p.Up(context.Background(), mustPlan(t, model.Request{Clusters: 1})); err != nil {
				t.Fatal(err)
			}
			e.kind.createHook = func(name string) error {
				if name == "cluster3" {
					return errors.New("kubeadm init failed")
				}
				return nil
			}
			_, err := e.p.Up(context.Background(), mustPlan(t, model.Request{Clusters: 3}), UpWithRetain(retain))
			if err == nil || !strings.Contains(err.Error(), `cluster "cluster3"`) || !strings.Contains(err.Error(), "kubeadm init failed") {
				t.Fatalf("error %v", err)
			}
			left, _ := e.kind.List()
			want := "cluster1"
			if retain {
				want = "cluster1 cluster2 cluster3"
			}
			if strings.Join(left, " ") != want {
				t.Errorf("clusters left %v, want %s", left, want)
			}
			if strings.Join(sorted(e.kind.logs), " ") != "cluster2 cluster3" {
				t.Errorf("logs exported for %v, want cluster2 cluster3", e.kind.logs)
			}
		})
	}
}

func TestUpInterruptDeletesClustersBeingCreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	var started sync.WaitGroup
	started.Add(2)
	e.kind.createHook = func(name string) error {
		started.Done()
		// Like kind, creation fails once its containers are deleted.
		for {
			e.kind.mu.Lock()
			gone := false
			for _, d := range e.kind.deleted {
				gone = gone || d == name
			}
			e.kind.mu.Unlock()
			if gone {
				return errors.New("container removed")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	go func() { started.Wait(); cancel() }()
	_, err := e.p.Up(ctx, mustPlan(t, model.Request{Clusters: 2}))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if left, _ := e.kind.List(); len(left) != 0 {
		t.Errorf("clusters left after interrupt: %v", left)
	}
	if len(e.kind.logs) != 2 {
		t.Errorf("logs exported for %v", e.kind.logs)
	}
}

func TestUpRefusesWhatIsNotItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Another environment's cluster with the same kind name.
	other := mustPlan(t, model.Request{Clusters: 1, Env: "other", NamePrefix: new(string)})
	if _, err := e.p.Up(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	// A kind cluster meshctl never recorded.
	e.kind.add("cluster2", mustPlan(t, model.Request{Clusters: 2}).KindConfig(mustPlan(t, model.Request{Clusters: 2}).Clusters[1]))
	_, err := e.p.Up(context.Background(), mustPlan(t, model.Request{Clusters: 2}), UpWithRecreate(true))
	if err == nil || !strings.Contains(err.Error(), `belongs to environment "other"`) {
		t.Fatalf("error %v", err)
	}
	_, err = e.p.Up(context.Background(), mustPlan(t, model.Request{Clusters: 2, NamePrefix: ptr("p-")}))
	if err != nil {
		t.Fatalf("side by side with a prefix: %v", err)
	}
	e2 := newEnv(t)
	e2.kind.add("cluster1", mustPlan(t, model.Request{Clusters: 1}).KindConfig(mustPlan(t, model.Request{Clusters: 1}).Clusters[0]))
	_, err = e2.p.Up(context.Background(), mustPlan(t, model.Request{Clusters: 1}))
	if err == nil || !strings.Contains(err.Error(), "not created by meshctl") {
		t.Fatalf("error %v", err)
	}
}

func TestUpNeedsDocker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.docker.down = true
	_, err := e.p.Up(context.Background(), mustPlan(t, model.Request{Clusters: 1}))
	if !errors.Is(err, ErrNoDocker) || !strings.Contains(err.Error(), "systemctl start docker") {
		t.Fatalf("error %v", err)
	}
	if len(e.kind.created) != 0 {
		t.Error("created clusters without Docker")
	}
}

func TestUpRejectsSubnetsOverlappingTheKindNetwork(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.docker.network = `[{"Subnet":"10.20.0.0/16","Gateway":"10.20.0.1"},{"Subnet":"fc00:f853:ccd:e793::/64"}]`
	_, err := e.p.Up(context.Background(), mustPlan(t, model.Request{Clusters: 2}))
	if err == nil || !strings.Contains(err.Error(), `cluster "cluster2": podSubnet 10.20.0.0/16 overlaps the docker network "kind" (10.20.0.0/16)`) {
		t.Fatalf("error %v", err)
	}
	if len(e.kind.created) != 0 {
		t.Error("created clusters despite the overlap")
	}
}

func TestDownStatusListKubeconfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	plan := mustPlan(t, model.Request{Clusters: 2, Env: "dev", Workers: 1, Registry: model.Registry{Enabled: true}})
	if _, err := e.p.Up(ctx, plan); err != nil {
		t.Fatal(err)
	}
	e.docker.network = `[{"Subnet":"172.18.0.0/16"}]`

	st, err := e.p.Status(ctx, "dev", model.DefaultRegistryName)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Ready || len(st.Clusters) != 2 || len(st.Clusters[0].Nodes) != 2 || st.Registry == nil || !st.Registry.Running {
		t.Errorf("status %+v", st)
	}
	// A cluster whose API cannot be read is reported, not fatal.
	e.kind.mu.Lock()
	e.kind.clusters["dev-cluster2"].nodes[1].broken = true
	e.kind.mu.Unlock()

	all, err := e.p.List(ctx)
	if err != nil || len(all) != 2 || all[0].Env() != "dev" {
		t.Errorf("list %+v %v", all, err)
	}
	kc, err := e.p.Kubeconfig(ctx, "dev", "cluster1", true)
	if err != nil || !strings.Contains(string(kc), "current-context: cluster1") {
		t.Errorf("kubeconfig %s %v", kc, err)
	}
	if _, err := e.p.Kubeconfig(ctx, "dev", "nope", false); err == nil || !strings.Contains(err.Error(), `no cluster "nope" in environment "dev" (it has cluster1, cluster2)`) {
		t.Errorf("unknown cluster: %v", err)
	}
	if _, err := e.p.Kubeconfig(ctx, "prod", "cluster1", false); err == nil || !strings.Contains(err.Error(), `environment "prod" has no clusters`) {
		t.Errorf("unknown env: %v", err)
	}

	res, err := e.p.Down(ctx, "dev", DownWithRegistry(model.DefaultRegistryName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(sorted(res.Deleted), " ") != "dev-cluster1 dev-cluster2" || res.Registry != model.DefaultRegistryName || res.Network != "kind" {
		t.Errorf("down %+v", res)
	}
	for _, c := range plan.Clusters {
		for _, internal := range []bool{false, true} {
			if _, err := os.Stat(e.p.KubeconfigPath("dev", c.Name, internal)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("kubeconfig left behind: %v", err)
			}
		}
	}
	again, err := e.p.Down(ctx, "dev")
	if err != nil || len(again.Deleted) != 0 {
		t.Errorf("second down: %+v %v", again, err)
	}
}

func TestDownNamedClusters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.p.Up(ctx, mustPlan(t, model.Request{Clusters: 1, Env: "a"})); err != nil {
		t.Fatal(err)
	}
	e.kind.add("leftover", mustPlan(t, model.Request{Clusters: 1}).KindConfig(mustPlan(t, model.Request{Clusters: 1}).Clusters[0]))
	if _, err := e.p.Down(ctx, "b", DownWithClusters("a-cluster1")); err == nil || !strings.Contains(err.Error(), `belongs to environment "a"`) {
		t.Errorf("deleting another environment's cluster by name: %v", err)
	}
	res, err := e.p.Down(ctx, "b", DownWithClusters("leftover"))
	if err != nil || strings.Join(res.Deleted, " ") != "leftover" {
		t.Errorf("down leftover: %+v %v", res, err)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// Before kind creates its network, a plan is checked against the subnets the
// network may get: Docker's default pools, and kind's name-derived IPv6 ULA.
func TestUpRejectsSubnetsOverlappingTheKindNetworkToBe(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // no kind network yet
	plan := mustPlan(t, model.Request{Specs: []model.Spec{
		{Name: "one", PodSubnet: "172.18.0.0/16"},
		{Name: "two", IPFamily: model.IPv6, PodSubnet: "fc00:f853:ccd:e700::/56"},
	}})
	_, err := e.p.Up(context.Background(), plan)
	for _, w := range []string{
		`cluster "one": podSubnet 172.18.0.0/16 overlaps a subnet Docker or kind may give the docker network "kind" (not created yet) (172.18.0.0/16)`,
		`cluster "two": podSubnet fc00:f853:ccd:e700::/56 overlaps a subnet Docker or kind may give the docker network "kind" (not created yet) (fc00:f853:ccd:e793::/64)`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v\nwant it to say %s", err, w)
		}
	}
	if len(e.kind.created) != 0 {
		t.Error("created clusters despite the overlap")
	}
}
