package mesh

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/meshctl/meshctl/internal/testbin"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/install/values"
)

// fakeProvider records what was asked of it; Status fails when statusErr is
// set, which is where connect starts.
type fakeProvider struct {
	mu        sync.Mutex
	ups       int
	dir       string
	statusErr error
}

func (f *fakeProvider) Up(_ context.Context, plan *cluster.Plan, _ ...cluster.UpOption) (*cluster.UpResult, error) {
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

func (f *fakeProvider) Environment(context.Context, string) ([]cluster.ClusterPlan, error) {
	return nil, nil
}

func (f *fakeProvider) ClusterKubeconfig(context.Context, cluster.ClusterPlan, bool) ([]byte, error) {
	return nil, errors.New("no kubeconfig")
}

func (f *fakeProvider) KubeconfigPath(env, name string, _ bool) string {
	return filepath.Join(f.dir, env, name, "kubeconfig")
}

func (f *fakeProvider) Status(context.Context, string, string) (*cluster.StatusResult, error) {
	return nil, f.statusErr
}

func (f *fakeProvider) Exec(context.Context, string, string, []byte, ...string) error { return nil }

func (f *fakeProvider) List(context.Context) ([]cluster.Existing, error) { return nil, nil }

func (f *fakeProvider) SetPools(context.Context, string, *cluster.Pools) error {
	return errors.New("no clusters")
}

// staticBinary builds a tiny static program for the dataplane image.
func staticBinary(t *testing.T) string {
	return testbin.Static(t, "meshctl", "package main\n\nfunc main() {}\n")
}

func plan(t *testing.T, existing ...int) *cluster.Plan {
	t.Helper()
	p, err := cluster.NewPlan(cluster.Request{Env: "mt", Clusters: 3})
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
		plan *cluster.Plan
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
			res, err := New(p, opts...).Up(context.Background(), tt.plan)
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
	b := New(p, WithArtifacts(t.TempDir()), WithImage(image.WithBinary(staticBinary(t))),
		WithValues(values.WithSet("image.repository=registry.example.com/mesh/dataplane")))
	if err := b.ValidateInstall(plan(t, 2)); err != nil {
		t.Fatal(err)
	}
}

// TestStepErrorKeepsWhatWasDone: a failed step reports the step and the
// environment, and the result still holds the clusters.
func TestStepErrorKeepsWhatWasDone(t *testing.T) {
	p := &fakeProvider{dir: t.TempDir(), statusErr: errors.New("docker is gone")}
	res, err := New(p, WithArtifacts(t.TempDir()), WithInstall(false)).Up(context.Background(), plan(t))
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
