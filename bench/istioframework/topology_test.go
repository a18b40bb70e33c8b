// Package istioframework reads the topology meshctl writes with Istio's own
// test framework code, as `go test -tags=integ ./tests/integration/...
// --istio.test.kube.topology=<artifacts>/<env>/topology.json` would.
package istioframework

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	istiocluster "istio.io/istio/pkg/test/framework/components/cluster"
	clusterkube "istio.io/istio/pkg/test/framework/components/cluster/kube"
	_ "istio.io/istio/pkg/test/framework/components/environment/kube" // registers --istio.test.kube.topology
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// TestFrameworkReadsMeshctlTopology writes the topology of an external
// control plane environment as `meshctl up` does (Provider.IstioTopology
// into <artifacts>/<env>/topology.json), hands it to Istio's framework
// through its own flag, and builds every cluster the way the framework's
// kube environment does (cluster/kube.BuildKube, a kube client each). With
// internal/testenv's API servers cached, each client then reaches its server;
// without, the client configs are still built and checked.
func TestFrameworkReadsMeshctlTopology(t *testing.T) {
	dir := t.TempDir()
	const env = "fw"
	plan, err := model.NewPlan(model.Request{Env: env, Specs: []model.Spec{
		{Name: "cfg", Network: "net-a", PrimaryClusterName: "cp", ConfigClusterName: "cfg"},
		{Name: "far", Network: "net-b", PrimaryClusterName: "cp", ConfigClusterName: "cfg"},
		{Name: "cp", Network: "net-a", ConfigClusterName: "cfg"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := cluster.NewProvider(cluster.ProviderWithArtifacts(dir))
	live := false
	if _, _, err := testenv.Binaries(); err == nil {
		live = true
	} else {
		t.Logf("no API servers (%v): checking client configs only", err)
	}
	servers := map[string]*rest.Config{}
	for _, c := range plan.Clusters {
		cfg := &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "t"}
		if live {
			cfg = testenv.New(t)
		}
		servers[c.Name] = cfg
		for _, internal := range []bool{false, true} {
			path := p.KubeconfigPath(env, c.Name, internal)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := clientcmd.WriteToFile(kubeconfig(c.Name, cfg), path); err != nil {
				t.Fatal(err)
			}
		}
	}
	topo, err := p.IstioTopology(env, plan.Clusters, false)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.MarshalIndent(topo, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := p.TopologyPath(env, false)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}

	// The framework's own parsing: its --istio.test.kube.topology flag.
	f := flag.Lookup("istio.test.kube.topology")
	if f == nil {
		t.Fatal("Istio's framework registers no --istio.test.kube.topology")
	}
	if err := f.Value.Set(path); err != nil {
		t.Fatalf("Istio's framework refuses %s: %v", path, err)
	}
	cfgs := reflect.ValueOf(f.Value).Elem().Convert(reflect.TypeOf([]istiocluster.Config(nil))).Interface().([]istiocluster.Config)
	if len(cfgs) != len(plan.Clusters) {
		t.Fatalf("framework read %d clusters, want %d", len(cfgs), len(plan.Clusters))
	}
	// Defaults and building as environment/kube's buildClusters does.
	all := istiocluster.Map{}
	var built []istiocluster.Cluster
	for _, cfg := range cfgs {
		if cfg.PrimaryClusterName == "" {
			cfg.PrimaryClusterName = cfg.Name
		}
		if cfg.ConfigClusterName == "" {
			cfg.ConfigClusterName = cfg.PrimaryClusterName
		}
		c, err := clusterkube.BuildKube(cfg, istiocluster.NewTopology(cfg, all))
		if err != nil {
			t.Fatalf("cluster %s: %v", cfg.Name, err)
		}
		all[c.Name()] = c
		built = append(built, c)
	}
	for i, c := range built {
		want := plan.Clusters[i]
		if c.Name() != want.Name || c.NetworkName() != want.Network || c.PrimaryName() != want.PrimaryClusterName || c.ConfigName() != want.ConfigClusterName {
			t.Errorf("framework's %s: network %s, primary %s, config %s; want %+v", c.Name(), c.NetworkName(), c.PrimaryName(), c.ConfigName(), want)
		}
		if got := c.RESTConfig().Host; got != servers[want.Name].Host {
			t.Errorf("framework's %s talks to %s, want %s", c.Name(), got, servers[want.Name].Host)
		}
		if live {
			if _, err := c.Kube().CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
				t.Errorf("framework's client of %s: %v", c.Name(), err)
			}
		}
	}
}

func kubeconfig(name string, cfg *rest.Config) clientcmdapi.Config {
	c := clientcmdapi.NewConfig()
	c.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, InsecureSkipTLSVerify: len(cfg.CAData) == 0}
	c.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	c.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	c.CurrentContext = name
	return *c
}
