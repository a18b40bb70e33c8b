package installer

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
)

// kubeconfigFor writes a kubeconfig for cfg, as meshctl's artifacts hold one
// per cluster.
func kubeconfigFor(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func actions(r ClusterResult) string {
	var out []string
	for _, rel := range r.Releases {
		out = append(out, rel.Name+"="+rel.Action)
	}
	return strings.Join(out, " ")
}

// TestIntegrationInstallUpgradeUninstall runs the Helm SDK against a real
// kube-apiserver. It has no kubelet, so no Pod ever runs: the installer
// does not wait for readiness here (WithWait(false)) and the test checks the
// objects the API server stored; waiting for Ready Pods is the e2e tier's.
func TestIntegrationInstallUpgradeUninstall(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: starts etcd and kube-apiserver")
	}
	cfg := testenv.New(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	target := Target{Cluster: "cluster1", Kubeconfig: kubeconfigFor(t, cfg), Values: clusterValues(t, "cluster1")}
	in := New(WithWait(false))

	// An unreachable cluster stops everything before anything is touched.
	down := Target{Cluster: "cluster2", Kubeconfig: kubeconfigFor(t, &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: cfg.TLSClientConfig}), Values: clusterValues(t, "cluster2")}
	if _, err := in.Install(ctx, target, down); err == nil || !strings.Contains(err.Error(), `cluster "cluster2" is unreachable`) {
		t.Fatalf("install with an unreachable cluster: %v", err)
	}
	if _, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-cni-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("something was installed although a cluster was unreachable: %v", err)
	}

	res, err := in.Install(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res.Clusters[0]); got != "meshctl-cni=installed meshctl-dataplane=installed" || res.Failed() {
		t.Fatalf("first install: %s (%+v)", got, res)
	}
	ds, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-cni-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "meshctl/dataplane:v0.0.0-golden" {
		t.Errorf("cni image %s", img)
	}
	if _, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-proxy", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	signer, err := cs.AppsV1().Deployments("istio-system").Get(ctx, "meshctl-signer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role, err := cs.RbacV1().ClusterRoles().Get(ctx, "meshctl-signer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 4 || role.Rules[2].ResourceNames[0] != "meshctl.dev/workload" {
		t.Errorf("signer rules %+v", role.Rules)
	}

	// Nothing changed: no new revision, no object touched.
	res, err = in.Install(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res.Clusters[0]); got != "meshctl-cni=unchanged meshctl-dataplane=unchanged" {
		t.Fatalf("re-install: %s", got)
	}
	if res.Clusters[0].Releases[0].Revision != 1 {
		t.Errorf("re-install made revision %d", res.Clusters[0].Releases[0].Revision)
	}
	again, _ := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-cni-node", metav1.GetOptions{})
	if again.ResourceVersion != ds.ResourceVersion {
		t.Errorf("re-install changed the DaemonSet (resourceVersion %s -> %s)", ds.ResourceVersion, again.ResourceVersion)
	}

	// A new binary (image ID) is an upgrade that rolls the Pods.
	target.Values = clusterValues(t, "cluster1", "image.id=sha256:fedcba")
	res, err = in.Install(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res.Clusters[0]); got != "meshctl-cni=upgraded meshctl-dataplane=upgraded" {
		t.Fatalf("upgrade: %s", got)
	}
	ds, _ = cs.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-cni-node", metav1.GetOptions{})
	if got := ds.Spec.Template.Annotations["meshctl.dev/image-id"]; got != "sha256:fedcba" {
		t.Errorf("pod template image-id %q after upgrade", got)
	}

	// An upgrade Kubernetes rejects (a CPU request that is not a quantity)
	// rolls back: the proxy keeps its resources. The CNI release, whose
	// manifest is unchanged, records the new values as a new revision.
	target.Values = clusterValues(t, "cluster1", "image.id=sha256:fedcba", "proxy.resources.requests.cpu=lots")
	res, err = in.Install(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	rel := res.Clusters[0].Releases
	t.Logf("failing upgrade reported: %s", res.Clusters[0].Error)
	if !res.Failed() || rel[0].Action != ActionUpgraded || rel[1].Action != ActionRolledBack || !strings.Contains(res.Clusters[0].Error, "meshctl-dataplane") {
		t.Fatalf("failing upgrade: %+v", res.Clusters[0])
	}
	proxy, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := proxy.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "10m" {
		t.Errorf("after a rolled-back upgrade the proxy requests cpu %s", got)
	}
	if signer.Spec.Template.Spec.Volumes[0].Secret.SecretName != "cacerts" {
		t.Errorf("signer mounts %+v", signer.Spec.Template.Spec.Volumes[0])
	}

	res, err = in.Uninstall(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res.Clusters[0]); got != "meshctl-dataplane=uninstalled meshctl-cni=uninstalled" {
		t.Fatalf("uninstall: %s", got)
	}
	for _, name := range []string{"meshctl-cni-node", "meshctl-proxy"} {
		if _, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("DaemonSet %s after uninstall: %v", name, err)
		}
	}
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "meshctl-cni", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole meshctl-cni after uninstall: %v", err)
	}
	res, err = in.Uninstall(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res.Clusters[0]); got != "meshctl-dataplane=not installed meshctl-cni=not installed" {
		t.Errorf("second uninstall: %s", got)
	}

	// A first install that fails leaves nothing behind (atomic), and the
	// chart after it is not attempted.
	target.Values = clusterValues(t, "cluster1", "cni.binDir=/opt/cni/../bin")
	res, err = in.Install(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res.Clusters[0]); got != "meshctl-cni=rolled back meshctl-dataplane=skipped" {
		t.Fatalf("failing install: %s (%s)", got, res.Clusters[0].Error)
	}
	t.Logf("failing install reported: %s", res.Clusters[0].Error)
	if _, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "meshctl-cni-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a failed install left its DaemonSet: %v", err)
	}
}
