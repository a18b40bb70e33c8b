package check

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/testenv"
)

type oneCluster struct{ kubeconfig []byte }

func (s oneCluster) Environment(context.Context, string) ([]cluster.ClusterPlan, error) {
	return []cluster.ClusterPlan{{Name: "c1", KindName: "it-c1", Network: "network-1"}}, nil
}

func (s oneCluster) Kubeconfig(context.Context, string, string, bool) ([]byte, error) {
	return s.kubeconfig, nil
}

// TestIntegrationServerObjects creates the check's objects on a real API
// server, which validates them (the dual-stack Service policy, the pod
// specs). testenv runs no scheduler or kubelet, so the server pod never
// runs: the check must end with an error naming the cluster and saying
// what it waited for, not hang.
func TestIntegrationServerObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := testenv.New(t)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c1"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["c1"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c1"] = &clientcmdapi.Context{Cluster: "c1", AuthInfo: "c1"}
	kc.CurrentContext = "c1"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = New(oneCluster{data}, WithTimeout(2*time.Second)).Check(ctx, "it")
	if err == nil || !strings.Contains(err.Error(), `cluster "c1"`) || !strings.Contains(err.Error(), "waiting for server pod meshctl-check/server to run") {
		t.Fatalf("err = %v, want a timeout naming cluster c1 and the server pod", err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	svc, err := client.CoreV1().Services(DefaultNamespace).Get(ctx, serverName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 1 || !strings.HasPrefix(svc.Spec.ClusterIPs[0], "10.0.0.") {
		t.Errorf("service addresses %v, want one from the single-stack range", svc.Spec.ClusterIPs)
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, DefaultNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No namespace controller here to finish it, but the delete was issued.
	if ns.DeletionTimestamp == nil {
		t.Error("the check's namespace was not deleted after the check")
	}
}
