package meshtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/connect/remotesecret"
	"github.com/meshctl/meshctl/pkg/meshca"
)

func mustPlan(t *testing.T, req model.Request) *model.Plan {
	t.Helper()
	p, err := model.NewPlan(req)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMatch(t *testing.T) {
	t.Parallel()
	want := mustPlan(t, model.Request{Env: "mt", Clusters: 2})
	two := want.Clusters
	threeOnTwoNetworks := mustPlan(t, model.Request{Env: "mt", Clusters: 3, Networks: 2}).Clusters
	remote := mustPlan(t, model.Request{Env: "mt", Specs: []model.Spec{{Name: "cluster1"}, {Name: "cluster2", PrimaryClusterName: "cluster1"}}}).Clusters
	renamed := mustPlan(t, model.Request{Env: "mt", Specs: []model.Spec{{Name: "east"}, {Name: "west"}}}).Clusters

	for _, tc := range []struct {
		name  string
		plan  *model.Plan
		have  []model.ClusterPlan
		wants []string // substrings of the one error; none: a match
	}{
		{"same clusters", want, two, nil},
		{"no topology takes any", nil, threeOnTwoNetworks, nil},
		{"nothing there", want, nil, []string{`environment "mt" has no clusters on this machine`, "meshctl up --env mt"}},
		{"nothing there, no topology", nil, nil, []string{`environment "mt" has no clusters`}},
		{"count and networks", want, threeOnTwoNetworks, []string{
			"it has 3 cluster(s) (cluster1, cluster2, cluster3), the topology wants 2 (cluster1, cluster2)",
			`cluster "cluster2": network "network-2", the topology wants "network-1"`,
			`cluster "cluster3": not in the topology`,
		}},
		{"names", want, renamed, []string{`cluster "cluster1": missing`, `cluster "cluster2": missing`, `cluster "east": not in the topology`}},
		{"roles", want, remote, []string{`cluster "cluster2": primary cluster "cluster1", the topology wants "cluster2"`, `config cluster "cluster1", the topology wants "cluster2"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := match("mt", tc.plan, tc.have)
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestCreateFailsBeforeTouchingAnything(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	existing := &fakeProvider{dir: dir, env: "mt", clusters: mustPlan(t, model.Request{Env: "mt", Clusters: 3, Networks: 2}).Clusters}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`[{"clusterName": "a", "podSubnet": "10.1.0.0/16", "workers": "two"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		opts  []Option
		wants []string
	}{
		{"reuse mismatch", []Option{WithEnv("mt"), WithReuse(true), WithClusters(2)},
			[]string{`-meshtest.reuse: environment "mt" does not match the topology`, "it has 3 cluster(s)", `cluster "cluster3": not in the topology`}},
		{"reuse of nothing", []Option{WithEnv("other"), WithReuse(true)}, []string{`environment "other" has no clusters`}},
		{"too many clusters", []Option{WithEnv("mt"), WithClusters(model.MaxGeneratedClusters + 1)}, []string{"the topology cannot be satisfied"}},
		{"bad topology file", []Option{WithEnv("mt"), WithTopology(bad)}, []string{bad, "workers: want a whole number"}},
		{"missing topology file", []Option{WithEnv("mt"), WithTopology(filepath.Join(dir, "nope.json"))}, []string{"nope.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakeProvider{dir: dir, env: existing.env, clusters: existing.clusters}
			d, err := create(context.Background(), isolated(p, dir, tc.opts...))
			if err == nil {
				t.Fatalf("no error; got %+v", d)
			}
			t.Logf("%v", err)
			if strings.Count(err.Error(), "meshtest:") != 1 {
				t.Errorf("want one message, got: %v", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nlacks %q", err, w)
				}
			}
			if len(d.Clusters) != 0 || len(p.execs) != 0 || len(p.clusters) != len(existing.clusters) {
				t.Errorf("something was done: %+v, execs %v", d, p.execs)
			}
		})
	}
}

func TestLookupNamesTheKnownClusters(t *testing.T) {
	t.Parallel()
	e := &Env{desc: description{Env: "mt"}, clusters: []*Cluster{{Name: "cluster1", KindName: "mt-cluster1"}, {Name: "cluster2", KindName: "mt-cluster2"}}}
	if c, err := e.lookup("mt-cluster2"); err != nil || c.Name != "cluster2" {
		t.Errorf("lookup by kind name: %v, %v", c, err)
	}
	_, err := e.lookup("cluster3")
	if err == nil || err.Error() != `meshtest: environment "mt" has no cluster "cluster3" (it has cluster1, cluster2)` {
		t.Errorf("error = %v", err)
	}
}

func TestDescriptionRoundTrip(t *testing.T) {
	t.Parallel()
	d := description{Env: "mt", Artifacts: "/a", EchoImage: "i", Owned: true, Clusters: []clusterDesc{{Name: "c1", Roles: []string{"primary"}, Kubeconfig: "/a/mt/c1/kubeconfig"}}}
	got, err := unmarshal(d.marshal())
	if err != nil || got.Clusters[0].Kubeconfig != d.Clusters[0].Kubeconfig || !got.Owned {
		t.Errorf("round trip: %+v, %v", got, err)
	}
	if _, err := unmarshal([]byte("{}")); err == nil || !strings.Contains(err.Error(), "process 1 described no environment") {
		t.Errorf("empty description: %v", err)
	}
}

// TestIntegrationCreateAndReuse drives both ways to an environment against
// two real kube-apiservers standing in for the clusters: up's flow through
// pkg/mesh (routes through the provider's node exec, remote secrets, the
// shared root CA installed as cacerts), then reuse of what is there, with
// working clients.
func TestIntegrationCreateAndReuse(t *testing.T) {
	kcs := twoAPIServers(t)
	ctx := context.Background()
	dir := t.TempDir()
	p := &fakeProvider{dir: filepath.Join(dir, "meshctl-up"), kubeconfigs: kcs}

	// Created: clusters, routes, cacerts.
	d, err := create(ctx, isolated(p, dir, WithEnv("mt"), WithClusters(2)))
	if err != nil {
		t.Fatal(err)
	}
	if !d.Owned || len(d.Clusters) != 2 || d.Clusters[1].Network != "network-1" {
		t.Fatalf("description: %+v", d)
	}
	routes := strings.Join(p.execs, "\n")
	// One script per node: its routes as one `ip -batch`, then the reconciler.
	for _, want := range []string{"mt-cluster1-control-plane sh -s: ip -batch - <<'MESHCTL_EOF' || { echo \"adding 2 routes failed\" >&2; exit 3; }\nroute replace 10.20.0.0/24 via 172.18.0.3\nroute replace 10.255.20.0/24 via 172.18.0.3\n",
		"mt-cluster2-control-plane sh -s: ip -batch - <<'MESHCTL_EOF' || { echo \"adding 2 routes failed\" >&2; exit 3; }\nroute replace 10.10.0.0/24 via 172.18.0.2\n"} {
		if !strings.Contains(routes, want) {
			t.Errorf("routes:\n%s\nlack %q", routes, want)
		}
	}
	e, err := load(d, p, log.NoopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	var roots []string
	for _, c := range e.Clusters() {
		sec, err := c.Kube.CoreV1().Secrets(meshca.Namespace).Get(ctx, meshca.SecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("cluster %s: %v", c.Name, err)
		}
		roots = append(roots, string(sec.Data[meshca.RootCertFile]))
	}
	if roots[0] == "" || roots[0] != roots[1] {
		t.Errorf("want one shared root in both clusters")
	}
	if _, err := os.Stat(filepath.Join(dir, "mt", "ca", meshca.RootKeyFile)); err != nil {
		t.Errorf("the CA files are not under the artifacts directory: %v", err)
	}
	// Both primaries read the other cluster through a remote secret.
	for i, c := range e.Clusters() {
		other := e.Clusters()[1-i].Name
		sec, err := c.Kube.CoreV1().Secrets(remotesecret.Namespace).Get(ctx, remotesecret.SecretPrefix+other, metav1.GetOptions{})
		if err != nil || len(sec.Data[other]) == 0 {
			t.Errorf("cluster %s: remote secret for %s: %v", c.Name, other, err)
		}
	}
	if got := e.Primaries(); len(got) != 2 || !got[0].Is(model.RolePrimary) {
		t.Errorf("primaries: %v", got)
	}

	// Reused: the same clusters, kubeconfigs read from the clusters into
	// this run's artifacts, owner-only, never deleted.
	other := filepath.Join(dir, "second-run")
	d2, err := create(ctx, isolated(p, other, WithEnv("mt"), WithReuse(true), WithClusters(2)))
	if err != nil {
		t.Fatal(err)
	}
	if d2.Owned || len(d2.Clusters) != 2 {
		t.Fatalf("reused description: %+v", d2)
	}
	for _, c := range d2.Clusters {
		st, err := os.Stat(c.Kubeconfig)
		if err != nil || st.Mode().Perm() != 0o600 || !strings.HasPrefix(c.Kubeconfig, other) {
			t.Errorf("kubeconfig %s: %v %v", c.Kubeconfig, st, err)
		}
	}
	e2, err := load(d2, p, log.NoopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	// The controller-runtime client reads the cluster too.
	var ns corev1.Namespace
	if err := e2.Clusters()[1].Client.Get(ctx, client.ObjectKey{Name: meshca.Namespace}, &ns); err != nil {
		t.Errorf("controller-runtime client: %v", err)
	}
	if err := e2.teardown(ctx); err != nil || len(p.downs) != 0 {
		t.Errorf("a reused environment was deleted: %v %v", err, p.downs)
	}
	e.desc.Keep = true
	if err := e.teardown(ctx); err != nil || len(p.downs) != 0 {
		t.Errorf("a kept environment was deleted: %v %v", err, p.downs)
	}
	e.desc.Keep = false
	if err := e.teardown(ctx); err != nil || len(p.downs) != 1 || p.downs[0] != "mt" {
		t.Errorf("the created environment was not deleted: %v %v", err, p.downs)
	}
}
