package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/connect/remotesecret"
)

// runningStatus is what the provider reports of clusters whose containers
// run and whose nodes are Ready; stateOf overrides a cluster's state, with
// the error the provider gives a cluster it cannot read.
func runningStatus(env string, cs []model.ClusterPlan, stateOf map[string]string) *cluster.StatusResult {
	res := &cluster.StatusResult{Env: env, Ready: true, State: cluster.EnvReady}
	for _, c := range cs {
		st := cluster.ClusterStatus{ClusterState: model.ClusterState{ClusterPlan: c}, Ready: true, State: cluster.StateRunning, Nodes: []cluster.NodeStatus{}}
		if s := stateOf[c.Name]; s != "" {
			st.Ready, st.State, st.Problems = false, s, []string{s + ": see the provider"}
			if s != cluster.StateRoutesStale {
				st.Error = s
			}
			res.Ready, res.State = false, cluster.EnvDegraded
			res.Problems = append(res.Problems, fmt.Sprintf("cluster %q: %s", c.Name, st.Problems[0]))
		}
		res.Clusters = append(res.Clusters, st)
	}
	return res
}

// The remote secrets Check finds wrong become problems of the clusters
// holding them, as the provider reports its own: the cluster not Ready, its
// state, the environment Degraded with the problem naming the cluster.
func TestRemoteSecretProblems(t *testing.T) {
	t.Parallel()
	plans := []model.ClusterPlan{{Name: "cluster1"}, {Name: "cluster2"}, {Name: "cluster3"}, {Name: "cluster4"}}
	sec := func(source, target, state, installed, server, err string) remotesecret.SecretCheck {
		return remotesecret.SecretCheck{Cluster: source, Target: target, Secret: "istio-system/istio-remote-secret-" + source,
			State: state, Installed: installed, Server: server, Error: err}
	}
	stale := sec("cluster1", "cluster2", remotesecret.SecretStale, "https://[fc00::3]:6443", "https://[fc00::5]:6443", "")
	tests := []struct {
		name    string
		stateOf map[string]string
		secrets []remotesecret.SecretCheck
		// want: each cluster's state and problems; empty: Ready.
		want map[string]string
	}{{
		name:    "stale",
		secrets: []remotesecret.SecretCheck{stale, sec("cluster2", "cluster1", remotesecret.SecretCurrent, "https://a:6443", "https://a:6443", "")},
		want:    map[string]string{"cluster2": "remote secrets stale: remote secret istio-system/istio-remote-secret-cluster1 is stale: it names cluster cluster1's API server https://[fc00::3]:6443, now https://[fc00::5]:6443; `meshctl up` (or `meshctl connect`) rewrites it"},
	}, {
		name: "missing, no kubeconfig, and unreadable, in one cluster",
		secrets: []remotesecret.SecretCheck{
			stale,
			sec("cluster3", "cluster1", remotesecret.SecretMissing, "", "https://c3:6443", ""),
			sec("cluster4", "cluster1", remotesecret.SecretStale, "", "https://c4:6443", ""),
			sec("cluster2", "cluster1", "", "", "https://c2:6443", `cluster "cluster1": reading istio-system/istio-remote-secret-cluster2: forbidden`),
		},
		want: map[string]string{
			"cluster1": "remote secrets stale: remote secret istio-system/istio-remote-secret-cluster3 is missing: istiod here cannot read cluster cluster3 (API server https://c3:6443); `meshctl up` (or `meshctl connect`) writes it again" +
				" | remote secret istio-system/istio-remote-secret-cluster4 is stale: it holds no kubeconfig for cluster cluster4 (API server now https://c4:6443); `meshctl up` (or `meshctl connect`) rewrites it" +
				` | checking remote secret istio-system/istio-remote-secret-cluster2: cluster "cluster1": reading istio-system/istio-remote-secret-cluster2: forbidden`,
			"cluster2": "remote secrets stale: remote secret istio-system/istio-remote-secret-cluster1 is stale: it names cluster cluster1's API server https://[fc00::3]:6443, now https://[fc00::5]:6443; `meshctl up` (or `meshctl connect`) rewrites it",
		},
	}, {
		// up --remote-secrets=false: nothing to check.
		name:    "none installed",
		secrets: []remotesecret.SecretCheck{sec("cluster1", "cluster2", remotesecret.SecretMissing, "", "https://a:6443", ""), sec("cluster2", "cluster1", "", "", "", "unreachable")},
		want:    map[string]string{},
	}, {
		// A stopped cluster's secrets and the secrets of it are not
		// read: its own problem is said, and up rewrites them after
		// starting it. A cluster with stale routes keeps that state and
		// lists its secret too.
		name:    "unhealthy clusters",
		stateOf: map[string]string{"cluster3": cluster.StateStopped, "cluster2": cluster.StateRoutesStale},
		secrets: []remotesecret.SecretCheck{
			stale,
			sec("cluster3", "cluster1", "", "", "", `cluster "cluster3": internal kubeconfig: container not running`),
			sec("cluster1", "cluster3", "", "", "https://c1:6443", `cluster "cluster3": reading: connection refused`),
		},
		want: map[string]string{
			"cluster2": "routes stale: routes stale: see the provider | remote secret istio-system/istio-remote-secret-cluster1 is stale: it names cluster cluster1's API server https://[fc00::3]:6443, now https://[fc00::5]:6443; `meshctl up` (or `meshctl connect`) rewrites it",
			"cluster3": "stopped: stopped: see the provider",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runningStatus("e", plans, tt.stateOf)
			addRemoteSecretProblems(res, &remotesecret.CheckResult{Env: "e", Secrets: tt.secrets})
			var envProblems []string
			for _, c := range res.Clusters {
				got := ""
				if !c.Ready {
					got = c.State + ": " + strings.Join(c.Problems, " | ")
				}
				if got != tt.want[c.Name] {
					t.Errorf("%s:\n got  %s\n want %s", c.Name, got, tt.want[c.Name])
				}
				for _, p := range c.Problems {
					envProblems = append(envProblems, fmt.Sprintf("cluster %q: %s", c.Name, p))
				}
			}
			if wantReady := len(tt.want) == 0; res.Ready != wantReady || (res.State == cluster.EnvReady) != wantReady {
				t.Errorf("environment ready %v, state %s; want ready %v", res.Ready, res.State, wantReady)
			}
			if strings.Join(res.Problems, "\n") != strings.Join(envProblems, "\n") {
				t.Errorf("environment problems, in cluster order, naming the cluster:\n%s\nwant\n%s", strings.Join(res.Problems, "\n"), strings.Join(envProblems, "\n"))
			}
		})
	}
}

// apiProvider is a Provider over real API servers: the clusters'
// kubeconfigs are theirs (the internal one with another server for a
// cluster in moved: its node got a new address), and Status reports every
// cluster running, as the provider does when the containers run and the
// nodes are Ready — which it does not tell from stale remote secrets.
type apiProvider struct {
	*fakeProvider
	kubeconfigs map[string][]byte
	moved       map[string]string
	// held counts RememberReads not released; unremembered counts the
	// kubeconfig reads made outside one.
	held, unremembered atomic.Int32
}

func (p *apiProvider) ClusterKubeconfig(_ context.Context, c model.ClusterPlan, internal bool) ([]byte, error) {
	if p.held.Load() == 0 {
		p.unremembered.Add(1)
	}
	kc := p.kubeconfigs[c.Name]
	if server := p.moved[c.Name]; internal && server != "" {
		return testenv.WithServer(kc, c.Name, server)
	}
	return kc, nil
}

func (p *apiProvider) Status(_ context.Context, env, _ string) (*cluster.StatusResult, error) {
	return runningStatus(env, p.clusters, nil), nil
}

func (p *apiProvider) RememberReads() func() {
	p.held.Add(1)
	return func() { p.held.Add(-1) }
}

// TestIntegrationStatusReportsStaleRemoteSecrets: on real API servers, an
// IPv6-only cluster holds an IPv4 cluster's remote secret by address. When
// that node moves, status used to say Ready while istiod in the IPv6
// cluster could no longer reach the other; now it is Degraded, naming the
// secret, the cluster, the old and the new server, until a rerun of the
// remote-secrets step (what up does) heals it. A missing secret is
// reported on its holder. An environment that never had remote secrets, or
// a Config without them, is not checked.
func TestIntegrationStatusReportsStaleRemoteSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	p := &apiProvider{fakeProvider: &fakeProvider{}, kubeconfigs: map[string][]byte{}, moved: map[string]string{}}
	clients := map[string]kubernetes.Interface{}
	for _, c := range []model.ClusterPlan{
		{Name: "cluster1", KindName: "st-cluster1", IPFamily: model.IPv4},
		{Name: "cluster2", KindName: "st-cluster2", IPFamily: model.IPv6},
	} {
		cfg := testenv.NewWithControllers(t, "serviceaccount-token-controller")
		clients[c.Name] = kubernetes.NewForConfigOrDie(cfg)
		p.kubeconfigs[c.Name] = testenv.Kubeconfig(t, c.Name, cfg)
		c.Network, c.PrimaryClusterName, c.ConfigClusterName, c.ControlPlanes = "network-1", c.Name, c.Name, 1
		p.clusters = append(p.clusters, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := NewConfig(p)
	status := func() *cluster.StatusResult {
		t.Helper()
		p.unremembered.Store(0)
		res, err := NewStatus(cfg).Run(ctx, "st")
		if err != nil {
			t.Fatal(err)
		}
		if n := p.unremembered.Load(); n > 0 {
			t.Errorf("status read %d kubeconfigs without the provider remembering its reads", n)
		}
		return res
	}
	ensure := func() {
		t.Helper()
		// The remote-secrets step of up, as up runs it.
		if _, err := cfg.remoteSecrets(p).Ensure(ctx, "st"); err != nil {
			t.Fatal(err)
		}
	}

	if st := status(); !st.Ready {
		t.Errorf("no remote secrets installed (up --remote-secrets=false): %s, problems %q", st.State, st.Problems)
	}
	ensure()
	if st := status(); !st.Ready {
		t.Errorf("after up: %s, problems %q", st.State, st.Problems)
	}

	old := p.kubeconfigs["cluster1"]
	oldServer := serverIn(t, old, "cluster1")
	const moved = "https://172.18.0.9:6443"
	p.moved["cluster1"] = moved
	st := status()
	if st.Ready || st.State != cluster.EnvDegraded {
		t.Errorf("cluster1's node moved: environment %s (ready %v), want %s: cluster2's istiod cannot reach cluster1", st.State, st.Ready, cluster.EnvDegraded)
	}
	for _, c := range st.Clusters {
		switch c.Name {
		case "cluster1": // it holds cluster2 by name, which did not move
			if !c.Ready || c.State != cluster.StateRunning {
				t.Errorf("cluster1: %s, problems %q", c.State, c.Problems)
			}
		case "cluster2":
			want := "remote secret istio-system/istio-remote-secret-cluster1 is stale: it names cluster cluster1's API server " + oldServer + ", now " + moved + "; `meshctl up` (or `meshctl connect`) rewrites it"
			if c.Ready || c.State != cluster.StateRemoteSecretsStale || len(c.Problems) != 1 || c.Problems[0] != want {
				t.Errorf("cluster2: ready %v, state %s, problems %q; want %s, %q", c.Ready, c.State, c.Problems, cluster.StateRemoteSecretsStale, want)
			}
		}
	}
	if len(st.Problems) != 1 || !strings.HasPrefix(st.Problems[0], `cluster "cluster2": remote secret istio-system/istio-remote-secret-cluster1 is stale`) {
		t.Errorf("environment problems %q", st.Problems)
	}
	// -o json carries it as every other problem, and no token.
	out, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	installed, err := clients["cluster2"].CoreV1().Secrets(remotesecret.Namespace).Get(ctx, remotesecret.SecretPrefix+"cluster1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token, err := clientcmd.RESTConfigFromKubeConfig(installed.Data["cluster1"])
	if err != nil || token.BearerToken == "" {
		t.Fatalf("installed secret: no token (%v)", err)
	}
	if !strings.Contains(string(out), `"state":"remote secrets stale"`) || strings.Contains(string(out), token.BearerToken) {
		t.Errorf("status JSON: %s", out)
	}

	// A Config without remote secrets does not check them.
	if st := runStatus(ctx, t, NewConfig(p, WithRemoteSecrets(false))); !st.Ready {
		t.Errorf("WithRemoteSecrets(false): %s, problems %q", st.State, st.Problems)
	}

	// A rerun heals.
	ensure()
	if st := status(); !st.Ready {
		t.Errorf("after rerunning up: %s, problems %q", st.State, st.Problems)
	}

	// A deleted secret is reported on its holder.
	if err := clients["cluster1"].CoreV1().Secrets(remotesecret.Namespace).Delete(ctx, remotesecret.SecretPrefix+"cluster2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st = status()
	if st.Ready || len(st.Problems) != 1 || !strings.HasPrefix(st.Problems[0], `cluster "cluster1": remote secret istio-system/istio-remote-secret-cluster2 is missing`) {
		t.Errorf("cluster1's secret of cluster2 deleted: %s, problems %q", st.State, st.Problems)
	}
}

func runStatus(ctx context.Context, t *testing.T, cfg *Config) *cluster.StatusResult {
	t.Helper()
	res, err := NewStatus(cfg).Run(ctx, "st")
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func serverIn(t *testing.T, kubeconfig []byte, name string) string {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Clusters[name].Server
}
