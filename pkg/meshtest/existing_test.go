package meshtest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/pkg/testenv"
)

// A suite on real clusters: a topology whose entries name existing clusters
// (meta.kubeconfig) gives an environment like a kind one — no Docker needed —
// whose clients reach those clusters and which holds the shared root CA.
func TestIntegrationExistingClusters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two kube-apiservers")
	}
	dir := t.TempDir()
	var topo []map[string]any
	for _, name := range []string{"east", "west"} {
		cfg := testenv.New(t)
		kc := clientcmdapi.NewConfig()
		kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
		kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
		kc.Contexts[name+"-ctx"] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
		kc.CurrentContext = name + "-ctx"
		if err := clientcmd.WriteToFile(*kc, filepath.Join(dir, name+".kubeconfig")); err != nil {
			t.Fatal(err)
		}
		topo = append(topo, map[string]any{"kind": "Kubernetes", "clusterName": name, "network": "net-" + name,
			"meta": map[string]any{"kubeconfig": name + ".kubeconfig", "context": name + "-ctx"}})
	}
	data, _ := json.Marshal(topo)
	topoFile := filepath.Join(dir, "topology.json")
	if err := os.WriteFile(topoFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock") // proves Docker is not needed
	env, err := New(ctx, WithTopology(topoFile), WithEnv("mx"), WithArtifacts(filepath.Join(dir, "artifacts")))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(env.Clusters()); got != 2 {
		t.Fatalf("%d clusters, want 2", got)
	}
	for _, c := range env.Clusters() {
		if c.Network != "net-"+c.Name {
			t.Errorf("%s: network %q", c.Name, c.Network)
		}
		sec, err := c.Kube.CoreV1().Secrets("istio-system").Get(ctx, "cacerts", metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s: cacerts: %v", c.Name, err)
			continue
		}
		if len(sec.Data["root-cert.pem"]) == 0 {
			t.Errorf("%s: cacerts has no root-cert.pem", c.Name)
		}
	}
	if err := env.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close never deletes an existing cluster: its API server still answers.
	if _, err := env.Cluster("east").Kube.Discovery().ServerVersion(); err != nil {
		t.Errorf("east after Close: %v", err)
	}
}
