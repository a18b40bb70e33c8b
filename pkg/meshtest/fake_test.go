package meshtest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// fakeProvider stands in for kind and Docker: its clusters are records in
// memory whose kubeconfigs point at real kube-apiservers (testenv), or at
// nothing for tests that never connect.
type fakeProvider struct {
	mu          sync.Mutex
	dir         string // where Up writes kubeconfigs
	env         string
	clusters    []model.ClusterPlan
	kubeconfigs [][]byte // by cluster index; nil: a kubeconfig that points nowhere
	execs       []string
	downs       []string
	upErr       error
	upAction    string
	pools       map[string]*model.Pools // by kind name
}

func (f *fakeProvider) kubeconfig(i int) []byte {
	if i < len(f.kubeconfigs) && f.kubeconfigs[i] != nil {
		return f.kubeconfigs[i]
	}
	return kubeconfigFor(&rest.Config{Host: "https://127.0.0.1:1"})
}

func (f *fakeProvider) Up(_ context.Context, plan *model.Plan, _ ...cluster.UpOption) (*cluster.UpResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.upErr != nil {
		return nil, f.upErr
	}
	f.env, f.clusters = plan.Env, plan.Clusters
	res := &cluster.UpResult{Env: plan.Env}
	action := f.upAction
	if action == "" {
		action = cluster.ActionCreated
	}
	for i, c := range plan.Clusters {
		path := filepath.Join(f.dir, plan.Env, c.Name, "kubeconfig")
		if err := writePrivate(path, f.kubeconfig(i)); err != nil {
			return nil, err
		}
		res.Clusters = append(res.Clusters, cluster.ClusterResult{Name: c.Name, KindName: c.KindName, Network: c.Network, Action: action, Kubeconfig: path})
	}
	return res, nil
}

func (f *fakeProvider) KubeconfigPath(env, name string, _ bool) string {
	return filepath.Join(f.dir, env, name, "kubeconfig")
}

func (f *fakeProvider) Environment(_ context.Context, env string) ([]model.ClusterState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if env != f.env {
		return nil, nil
	}
	out := make([]model.ClusterState, len(f.clusters))
	for i, c := range f.clusters {
		out[i].ClusterPlan = c
	}
	return out, nil
}

func (f *fakeProvider) ClusterKubeconfig(_ context.Context, want model.ClusterPlan, _ bool) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range f.clusters {
		if c.Name == want.Name && c.KindName == want.KindName {
			return f.kubeconfig(i), nil
		}
	}
	return nil, fmt.Errorf("no cluster %q (kind %q)", want.Name, want.KindName)
}

// Status reports one Ready control-plane node per cluster, 172.18.0.<i+2>,
// with the first /24 of the cluster's pod subnet.
func (f *fakeProvider) Status(_ context.Context, env, registry string) (*cluster.StatusResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &cluster.StatusResult{Env: env, Ready: true}
	for i, c := range f.clusters {
		cidr := strings.Replace(c.PodSubnets[0], ".0.0/16", ".0.0/24", 1)
		st.Clusters = append(st.Clusters, cluster.ClusterStatus{ClusterState: model.ClusterState{ClusterPlan: c}, Ready: true, Nodes: []cluster.NodeStatus{{
			Name: c.KindName + "-control-plane", Role: "control-plane", Ready: true,
			IPs: []string{fmt.Sprintf("172.18.0.%d", i+2)}, PodCIDRs: []string{cidr},
		}}})
	}
	return st, nil
}

func (f *fakeProvider) Down(_ context.Context, env string, opts ...cluster.DownOption) (*cluster.DownResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.downs = append(f.downs, env)
	f.clusters = nil
	return &cluster.DownResult{Env: env}, nil
}

// List reports the environment's clusters with their records, as
// cluster.Provider does for every kind cluster on the machine.
func (f *fakeProvider) List(context.Context) ([]cluster.Listed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cluster.Listed
	for _, c := range f.clusters {
		rec := &model.Record{Env: f.env, Cluster: model.ClusterState{ClusterPlan: c}, Pools: &model.Pools{}}
		if p, ok := f.pools[c.KindName]; ok {
			rec.Pools = p
		}
		kindName := c.KindName
		if c.Existing {
			kindName = ""
		}
		out = append(out, cluster.Listed{KindName: kindName, Record: rec})
	}
	return out, nil
}

func (f *fakeProvider) SetPools(_ context.Context, kindName string, pools *model.Pools) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pools == nil {
		f.pools = map[string]*model.Pools{}
	}
	f.pools[kindName] = pools
	return nil
}

func (f *fakeProvider) Exec(_ context.Context, kindName, node string, stdin []byte, argv ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execs = append(f.execs, fmt.Sprintf("%s %s: %s", node, strings.Join(argv, " "), strings.TrimSpace(string(stdin))))
	return nil
}

// kubeconfigFor writes a kubeconfig for a rest.Config with inline
// certificates (testenv's).
func kubeconfigFor(cfg *rest.Config) []byte {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["c"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "c"}
	kc.CurrentContext = "c"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		panic(err)
	}
	return b
}

// twoAPIServers starts two real kube-apiservers, each with the
// controller-manager's token controller (remote secrets need service account
// tokens): the clusters of tests that talk to Kubernetes. It skips (saying
// why) without the binaries.
func twoAPIServers(t *testing.T) [][]byte {
	t.Helper()
	if testing.Short() {
		t.Skip("integration: skipped with -short")
	}
	// testenv.New runs on the test goroutine: it may Skip or Fatal.
	const tokens = "serviceaccount-token-controller"
	return [][]byte{kubeconfigFor(testenv.NewWithControllers(t, tokens)), kubeconfigFor(testenv.NewWithControllers(t, tokens))}
}

func isolated(p provider, dir string, opts ...Option) options {
	o := options{cfg: defaultConfig(), prov: p, isolated: true}
	o.cfg.Artifacts = dir
	for _, opt := range opts {
		opt(&o)
	}
	o.logger = log.NoopLogger{}
	return o
}
