package meshtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/install/installer"
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
	ctx, cancel := context.WithCancel(context.Background())
	// The stand-ins stop before the test ends: they log through t.
	var standIns sync.WaitGroup
	defer standIns.Wait()
	defer cancel()
	for k, name := range []string{"east", "west"} {
		// The token controller: remote secrets wait for their reader's token.
		cfg := testenv.NewWithControllers(t, "serviceaccount-token-controller")
		// Two networks: each cluster gets an east-west gateway Service.
		// An existing cluster brings its own load balancer (meshctl puts
		// MetalLB only on kind clusters); here a loop stands in for a
		// cloud's controller and gives the Service a documentation address.
		standIns.Go(func() {
			if err := testenv.LoadBalancer(ctx, cfg, gateway.GatewayNamespace, gateway.GatewayName, fmt.Sprintf("192.0.2.%d", 10+k)); err != nil {
				t.Error(err)
			}
		})
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
		gw, err := c.Kube.CoreV1().Services(gateway.GatewayNamespace).Get(ctx, gateway.GatewayName, metav1.GetOptions{})
		if err != nil || len(gw.Status.LoadBalancer.Ingress) == 0 {
			t.Errorf("%s: east-west gateway Service without its address: %v", c.Name, err)
		}
	}
	plantRelease(ctx, t, env)
	if err := env.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close never deletes an existing cluster: its API server still answers.
	if _, err := env.Cluster("east").Kube.Discovery().ServerVersion(); err != nil {
		t.Errorf("east after Close: %v", err)
	}
	// Close is `meshctl down`: meshctl's Helm releases are uninstalled from
	// existing clusters, not left behind with their objects.
	for _, c := range env.Clusters() {
		rels, err := c.Kube.CoreV1().Secrets(installer.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=meshctl-dataplane"})
		if err != nil {
			t.Fatal(err)
		}
		if len(rels.Items) > 0 {
			t.Errorf("%s: Helm release meshctl-dataplane is still there after Close (%d revision Secrets): the teardown skipped the Helm step", c.Name, len(rels.Items))
		}
		if _, err := c.Kube.CoreV1().ConfigMaps(installer.DefaultNamespace).Get(ctx, "planted", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the release's ConfigMap after Close: %v, want NotFound", c.Name, err)
		}
	}
}

// plantRelease installs a Helm release named as meshctl's dataplane chart
// into every cluster, as `meshctl install` leaves one: a chart of one
// ConfigMap stands in for the real one, whose Pods these node-less API
// servers would never run.
func plantRelease(ctx context.Context, t *testing.T, env *Env) {
	t.Helper()
	chart := fstest.MapFS{
		"dataplane/Chart.yaml":             {Data: []byte("apiVersion: v2\nname: meshctl-dataplane\nversion: 0.0.1\n")},
		"dataplane/templates/planted.yaml": {Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted\n")},
	}
	var targets []installer.Target
	for _, c := range env.Clusters() {
		targets = append(targets, installer.Target{Cluster: c.Name, Kubeconfig: c.Kubeconfig, Values: map[string]any{}})
	}
	res, err := installer.New(installer.WithCharts(chart, "dataplane"), installer.WithReleaseNames("meshctl-dataplane"), installer.WithWait(false)).Install(ctx, targets...)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed() {
		t.Fatalf("planting a release: %+v", res.Clusters)
	}
}
