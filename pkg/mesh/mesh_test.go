package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/internal/testbin"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/install/installer"
	"github.com/meshctl/meshctl/pkg/install/values"
)

// fakeProvider records what was asked of it; Status fails when statusErr is
// set, which is where connect starts.
type fakeProvider struct {
	mu        sync.Mutex
	ups       int
	dir       string
	status    *cluster.StatusResult
	statusErr error
	// execs records each Exec as "kindName/node: argv"; Exec fails on the
	// nodes in execFail.
	execs    []string
	execFail map[string]bool
	// execHook, when set, answers each Exec after execFail (called outside
	// the lock: Execs run in parallel).
	execHook func(node string, stdin []byte, argv []string) error
	// clusters are Environment's; downs records each Down.
	clusters []model.ClusterPlan
	downs    []string
}

func (f *fakeProvider) Up(_ context.Context, plan *model.Plan, _ ...cluster.UpOption) (*cluster.UpResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ups++
	res := &cluster.UpResult{Env: plan.Env}
	for _, c := range plan.Clusters {
		res.Clusters = append(res.Clusters, cluster.ClusterResult{Name: c.Name, Network: c.Network, Action: cluster.ActionCreated,
			Kubeconfig: f.KubeconfigPath(plan.Env, c.Name, false)})
	}
	return res, nil
}

func (f *fakeProvider) Down(_ context.Context, env string, opts ...cluster.DownOption) (*cluster.DownResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.downs = append(f.downs, fmt.Sprintf("%s (%d options)", env, len(opts)))
	return &cluster.DownResult{Env: env}, nil
}

func (f *fakeProvider) Environment(context.Context, string) ([]model.ClusterState, error) {
	out := make([]model.ClusterState, len(f.clusters))
	for i, c := range f.clusters {
		out[i].ClusterPlan = c
	}
	return out, nil
}

func (f *fakeProvider) ClusterKubeconfig(context.Context, model.ClusterPlan, bool) ([]byte, error) {
	return nil, errors.New("no kubeconfig")
}

func (f *fakeProvider) KubeconfigPath(env, name string, _ bool) string {
	return filepath.Join(f.dir, env, name, "kubeconfig")
}

func (f *fakeProvider) Status(context.Context, string, string) (*cluster.StatusResult, error) {
	return f.status, f.statusErr
}

func (f *fakeProvider) Exec(_ context.Context, kindName, node string, stdin []byte, argv ...string) error {
	f.mu.Lock()
	f.execs = append(f.execs, kindName+"/"+node+": "+strings.Join(argv, " "))
	fail, hook := f.execFail[node], f.execHook
	f.mu.Unlock()
	if fail {
		return errors.New("ctr: connection refused")
	}
	if hook != nil {
		return hook(node, stdin, argv)
	}
	return nil
}

func (f *fakeProvider) List(context.Context) ([]cluster.Listed, error) { return nil, nil }

func (f *fakeProvider) SetPools(context.Context, string, *model.Pools) error {
	return errors.New("no clusters")
}

// staticBinary builds a tiny static program for the dataplane image.
func staticBinary(t *testing.T) string {
	return testbin.Static(t, "meshctl", "package main\n\nfunc main() {}\n")
}

func plan(t *testing.T, existing ...int) *model.Plan {
	t.Helper()
	p, err := model.NewPlan(model.Request{Env: "mt", Clusters: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range existing {
		p.Clusters[i].Existing = true
	}
	return p
}

// TestUpRefusesBeforeCreating: what the install would refuse is refused
// before any cluster is created.
func TestUpRefusesBeforeCreating(t *testing.T) {
	bin := staticBinary(t)
	tests := []struct {
		name string
		plan *model.Plan
		opts []Option
		want []string
	}{
		{"existing cluster without a registry", plan(t, 1, 2), nil,
			[]string{"cluster2, cluster3", "--image-registry", "side-loaded"}},
		{"bad values", plan(t), []Option{WithValues(values.WithSet("global.meshId=typo"))},
			[]string{"meshId"}},
		{"bad registry", plan(t, 1), []Option{WithImageRegistry("not a registry")},
			[]string{`"not a registry"`}},
		{"no artifacts for the CA", plan(t), []Option{WithArtifacts("")},
			[]string{"WithArtifacts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProvider{dir: t.TempDir()}
			opts := append([]Option{WithArtifacts(t.TempDir()), WithImage(image.WithBinary(bin))}, tt.opts...)
			res, err := NewUp(NewConfig(p, opts...)).Run(context.Background(), tt.plan)
			if err == nil || res != nil {
				t.Fatalf("Up = %+v, %v; want an error", res, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if p.ups != 0 {
				t.Errorf("clusters were created before the error")
			}
		})
	}
}

// TestUserImageNeedsNoRegistry: values that name the image themselves make
// an existing cluster installable without a push.
func TestUserImageNeedsNoRegistry(t *testing.T) {
	p := &fakeProvider{dir: t.TempDir()}
	b := NewConfig(p, WithArtifacts(t.TempDir()), WithImage(image.WithBinary(staticBinary(t))),
		WithValues(values.WithSet("image.repository=registry.example.com/mesh/dataplane")))
	if err := NewInstall(b).Validate(plan(t, 2)); err != nil {
		t.Fatal(err)
	}
}

// TestStepErrorKeepsWhatWasDone: a failed step reports the step and the
// environment, and the result still holds the clusters.
func TestStepErrorKeepsWhatWasDone(t *testing.T) {
	p := &fakeProvider{dir: t.TempDir(), statusErr: errors.New("docker is gone")}
	res, err := NewUp(NewConfig(p, WithArtifacts(t.TempDir()), WithInstall(false))).Run(context.Background(), plan(t))
	var se *StepError
	if !errors.As(err, &se) || se.Step != StepConnect || se.Env != "mt" || !strings.Contains(err.Error(), "docker is gone") {
		t.Fatalf("Up error = %v, want a StepError for %q", err, StepConnect)
	}
	if res == nil || len(res.Clusters) != 3 || p.ups != 1 {
		t.Fatalf("result = %+v, want the three clusters", res)
	}
	if !strings.Contains(err.Error(), `environment "mt" is up, but step "connect" failed`) {
		t.Errorf("message: %v", err)
	}
}

// TestUninstallRemovesTheImage: after the charts are gone, the image Install
// side-loaded is removed from the nodes of the kind clusters whose uninstall
// succeeded — not from a cluster whose charts are still there, nor from an
// existing cluster — and what goes wrong is a warning naming the node or
// cluster, never an error.
func TestUninstallRemovesTheImage(t *testing.T) {
	kindCluster := func(name string, nodes ...string) cluster.ClusterStatus {
		c := cluster.ClusterStatus{ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: name, KindName: "mt-" + name}}, Ready: true}
		for _, n := range nodes {
			c.Nodes = append(c.Nodes, cluster.NodeStatus{Name: "mt-" + name + "-" + n})
		}
		return c
	}
	unreadable := kindCluster("cluster4")
	unreadable.Error = "connection refused"
	existing := cluster.ClusterStatus{ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: "cluster3", Existing: true}},
		Nodes: []cluster.NodeStatus{{Name: "cloud-node"}}}
	p := &fakeProvider{dir: t.TempDir(), execFail: map[string]bool{"mt-cluster1-worker": true},
		status: &cluster.StatusResult{Env: "mt", Clusters: []cluster.ClusterStatus{
			kindCluster("cluster1", "control-plane", "worker"),
			kindCluster("cluster2", "control-plane"),
			existing,
			unreadable,
			kindCluster("cluster5", "control-plane"),
		}}}
	var logs bytes.Buffer
	b := NewConfig(p, WithLogger(cli.NewLogger(&logs)), WithImage(image.WithBinary(staticBinary(t)), image.WithTag("t1")))
	var cs []model.ClusterPlan
	for _, c := range p.status.Clusters[:4] { // cluster5 is not being uninstalled
		cs = append(cs, c.ClusterPlan)
	}
	res := &installer.Result{Clusters: []installer.ClusterResult{
		{Cluster: "cluster1"}, {Cluster: "cluster2", Error: "uninstalling meshctl-cni: timed out"}, {Cluster: "cluster3"}, {Cluster: "cluster4"}}}
	b.removeImage(context.Background(), "mt", cs, res)

	_, id, err := b.dataplaneImage()
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, e := range p.execs {
		node, argv, _ := strings.Cut(e, ": ")
		nodes = append(nodes, node)
		if !strings.HasSuffix(argv, " docker.io/meshctl/dataplane:t1 "+id) || !strings.Contains(argv, "images rm") {
			t.Errorf("%s ran %q, want the removal of docker.io/meshctl/dataplane:t1 (ID %s)", node, argv, id)
		}
	}
	sort.Strings(nodes)
	if got, want := strings.Join(nodes, " "), "mt-cluster1/mt-cluster1-control-plane mt-cluster1/mt-cluster1-worker"; got != want {
		t.Errorf("removed from %s, want only %s", got, want)
	}
	out := logs.String()
	t.Logf("uninstall's log:\n%s", out)
	for _, want := range []string{
		"WARNING: removing docker.io/meshctl/dataplane:t1 from node mt-cluster1-worker of cluster mt-cluster1: ctr: connection refused",
		`WARNING: leaving docker.io/meshctl/dataplane:t1 in place: cluster "cluster4": listing nodes: connection refused`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "WARNING") != 2 {
		t.Errorf("want exactly two warnings:\n%s", out)
	}
}

// TestDownUninstallsBeforeDeleting: Down's Helm step runs on the clusters it
// keeps — existing ones; kind clusters only with UninstallOnly — before the
// provider deletes anything, and a Helm step that cannot run stops Down
// before the provider removes meshctl's objects behind Helm's back.
func TestDownUninstallsBeforeDeleting(t *testing.T) {
	dir := t.TempDir()
	// A kubeconfig whose API server does not answer: the Helm step fails
	// wherever it runs, which shows where it runs.
	kc := []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: c, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: c}}]\ncurrent-context: c\n")
	for _, name := range []string{"kind1", "ext"} {
		path := filepath.Join(dir, "mt", name, "kubeconfig")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, kc, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kind := model.ClusterPlan{Name: "kind1", KindName: "mt-kind1"}
	ext := model.ClusterPlan{Name: "ext", Existing: true}
	tests := []struct {
		name          string
		clusters      []model.ClusterPlan
		uninstallOnly bool
		wantErr       string // empty: no Helm step, Down goes ahead
		notIn         string // a cluster the Helm step must leave alone
	}{
		{"kind clusters only", []model.ClusterPlan{kind}, false, "", ""},
		{"an existing cluster", []model.ClusterPlan{kind, ext}, false, `cluster "ext" is unreachable`, `"kind1"`},
		{"uninstall only", []model.ClusterPlan{kind}, true, `cluster "kind1" is unreachable`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProvider{dir: dir, clusters: tt.clusters}
			d := NewDown(NewConfig(p))
			d.Registry, d.UninstallOnly = "reg", tt.uninstallOnly
			_, err := d.Run(context.Background(), "mt")
			if tt.wantErr == "" {
				if err != nil || len(p.downs) != 1 || p.downs[0] != "mt (3 options)" {
					t.Fatalf("Down = %v, provider's downs %q; want one with registry, clusters and uninstall-only", err, p.downs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "uninstalling meshctl's charts") || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Down error = %v, want the Helm step's, naming %s", err, tt.wantErr)
			}
			if tt.notIn != "" && strings.Contains(err.Error(), tt.notIn) {
				t.Errorf("the Helm step ran on %s, a kind cluster Down deletes: %v", tt.notIn, err)
			}
			if len(p.downs) > 0 {
				t.Errorf("the provider's Down ran after the Helm step failed: %q", p.downs)
			}
		})
	}
}

// An install's error names each failed cluster with its cause, the
// dataplane's and Istio's, and Failed lists each cluster once.
func TestInstallReportErrNamesTheDataplanesAndIstiosCauses(t *testing.T) {
	r := &InstallReport{
		Clusters: []installer.ClusterResult{{Cluster: "cluster1", Error: "meshctl-cni: timed out"}, {Cluster: "cluster2"}},
		Istio:    &IstioReport{Clusters: []installer.ClusterResult{{Cluster: "cluster1", Error: "istiod: timed out"}, {Cluster: "cluster2"}}},
	}
	want := "install failed in cluster(s) cluster1 (meshctl-cni: timed out); cluster1 (istiod: timed out)"
	if err := r.Err(); err == nil || err.Error() != want {
		t.Fatalf("Err = %v, want %q", err, want)
	}
	if got := r.Failed(); !slices.Equal(got, []string{"cluster1"}) {
		t.Fatalf("Failed = %v, want [cluster1]", got)
	}
	if err := (&InstallReport{Clusters: []installer.ClusterResult{{Cluster: "cluster1"}}}).Err(); err != nil {
		t.Fatalf("no failed cluster: got %v", err)
	}
}

// The verbs' clients are not held to client-go's 5 QPS: up applies dozens
// of objects per cluster in a row (see kubeclient.WithCommandRateLimit).
func TestConfigClientsHaveTheCommandRateLimit(t *testing.T) {
	kc := []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	cfg, err := NewConfig(&fakeProvider{}).Clients().Bytes(kc, "").RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS != 50 || cfg.Burst != 100 {
		t.Errorf("qps %g, burst %d: want 50 and 100", cfg.QPS, cfg.Burst)
	}
}
