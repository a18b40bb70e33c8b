package istiocharts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/connect/remotesecret"
	"github.com/meshctl/meshctl/pkg/install/values"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// oneCluster serves one testenv API server as an environment.
type oneCluster struct {
	plan       model.ClusterPlan
	kubeconfig []byte
}

func (o oneCluster) Environment(context.Context, string) ([]model.ClusterState, error) {
	return []model.ClusterState{{ClusterPlan: o.plan}}, nil
}

func (o oneCluster) ClusterKubeconfig(context.Context, model.ClusterPlan, bool) ([]byte, error) {
	return o.kubeconfig, nil
}

// TestIstioChartsInstallAfterMeshctl is the user's path, against a real API
// server (with kube-controller-manager's token controller): meshctl's
// reader for remote secrets and its cacerts are in the cluster, then Istio's
// base and istiod charts install with Helm, no flag needed — as they did not
// while meshctl's reader was istio-reader-service-account.
func TestIstioChartsInstallAfterMeshctl(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := testenv.NewWithControllers(t, "serviceaccount-token-controller")
	dir := t.TempDir()
	kcPath := filepath.Join(dir, "kubeconfig")
	kc := kubeconfigBytes(t, "cluster1", cfg)
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// What `meshctl up` puts into istio-system.
	src := oneCluster{plan: model.ClusterPlan{Name: "cluster1", KindName: "cluster1", Network: "network-1", PrimaryClusterName: "cluster1", ConfigClusterName: "cluster1"}, kubeconfig: kc}
	if _, err := remotesecret.New(src, remotesecret.WithTimeout(time.Minute)).Secret(ctx, "it", "cluster1"); err != nil {
		t.Fatal(err)
	}
	ca := meshca.New(meshca.Dir(dir, "it"))
	if _, err := ca.Ensure("cluster1"); err != nil {
		t.Fatal(err)
	}
	if err := ca.Install(ctx, map[string]string{"cluster1": kcPath}); err != nil {
		t.Fatal(err)
	}

	plan, err := model.NewPlan(model.Request{Clusters: 1})
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := values.New().Render(plan)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []struct{ path, release string }{{"base", "istio-base"}, {"istio-control/istio-discovery", "istiod"}} {
		flags := genericclioptions.NewConfigFlags(false)
		ns := "istio-system"
		flags.KubeConfig, flags.Namespace = &kcPath, &ns
		hc := new(action.Configuration)
		if err := hc.Init(flags, ns, "secret", t.Logf); err != nil {
			t.Fatal(err)
		}
		in := action.NewInstall(hc)
		in.ReleaseName, in.Namespace = ch.release, ns
		if _, err := in.RunWithContext(ctx, loadChart(t, ch.path), rendered[0].Values); err != nil {
			t.Errorf("helm install %s (Istio's %s chart) after meshctl: %v", ch.release, ch.path, err)
		}
	}
}

func kubeconfigBytes(t *testing.T, name string, cfg *rest.Config) []byte {
	t.Helper()
	c := clientcmdapi.NewConfig()
	c.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	c.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	c.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	c.CurrentContext = name
	out, err := clientcmd.Write(*c)
	if err != nil {
		t.Fatal(fmt.Errorf("kubeconfig: %w", err))
	}
	return out
}
