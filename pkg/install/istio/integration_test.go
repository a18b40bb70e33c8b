package istio

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/install/installer"
	"github.com/meshctl/meshctl/pkg/install/values"
)

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

func releaseActions(c installer.ClusterResult) string {
	var out []string
	for _, r := range c.Releases {
		out = append(out, r.Name+"="+r.Action)
	}
	return strings.Join(out, " ")
}

// TestIntegrationIstioCharts installs Istio's real base and istiod charts
// (the module download's) with the values `values render` gives cluster1,
// against a real kube-apiserver. Without a kubelet nothing runs, so the
// installer does not wait; it checks what the API server stored, that a
// rerun makes no new revision, and that uninstall removes both releases.
func TestIntegrationIstioCharts(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: starts etcd and kube-apiserver")
	}
	charts := chartsDir(t)
	cfg := testenv.New(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	plan, err := model.NewPlan(model.Request{Clusters: 1})
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := values.New().Render(plan)
	if err != nil {
		t.Fatal(err)
	}
	tgt := Target{Target: installer.Target{Cluster: "cluster1", Kubeconfig: kubeconfigFor(t, cfg), Values: Images{}.Apply(rendered[0].Values)}, Primary: "cluster1"}
	in := New(WithCharts(charts), WithWait(false))

	res, err := in.Install(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	if got := releaseActions(res.Clusters[0]); got != "istio-base=installed istiod=installed" || res.Failed() {
		t.Fatalf("install: %s (%+v)", got, res)
	}
	d, err := cs.AppsV1().Deployments("istio-system").Get(ctx, "istiod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "meshctl/pilot:"+Version || c.ImagePullPolicy != "IfNotPresent" {
		t.Errorf("istiod runs %s (%s), want the offline build meshctl/pilot:%s, IfNotPresent", c.Image, c.ImagePullPolicy, Version)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["CLUSTER_ID"] != "cluster1" {
		t.Errorf("istiod CLUSTER_ID %q, want cluster1 (from values render)", env["CLUSTER_ID"])
	}
	if _, err := cs.CoreV1().ServiceAccounts("istio-system").Get(ctx, "istio-reader-service-account", metav1.GetOptions{}); err != nil {
		t.Errorf("base chart's reader account: %v", err)
	}

	res, err = in.Install(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	if got := releaseActions(res.Clusters[0]); got != "istio-base=unchanged istiod=unchanged" {
		t.Fatalf("rerun: %s (%+v)", got, res)
	}
	for _, r := range res.Clusters[0].Releases {
		if r.Revision != 1 {
			t.Errorf("rerun: %s at revision %d, want 1", r.Name, r.Revision)
		}
	}
	again, _ := cs.AppsV1().Deployments("istio-system").Get(ctx, "istiod", metav1.GetOptions{})
	if again.ResourceVersion != d.ResourceVersion {
		t.Errorf("rerun changed istiod (resourceVersion %s -> %s)", d.ResourceVersion, again.ResourceVersion)
	}

	un, err := New().Uninstall(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	if got := releaseActions(un.Clusters[0]); got != "ztunnel=not installed istio-cni=not installed istiod=uninstalled istio-base=uninstalled" {
		t.Fatalf("uninstall: %s (%+v)", got, un)
	}
	un, err = New().Uninstall(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	if got := releaseActions(un.Clusters[0]); got != "ztunnel=not installed istio-cni=not installed istiod=not installed istio-base=not installed" {
		t.Fatalf("second uninstall: %s", got)
	}
}

// TestIntegrationRemoteNamesItsControlPlane: a remote's Istio namespace is
// annotated with its primary (topology.istio.io/controlPlaneClusters)
// before its charts go in, as Istio's primary-remote guide does; without
// it the primary's istiod leaves the remote's injection webhook without a
// CA bundle (found on kind: "x509: certificate signed by unknown
// authority" for every injected pod). The remote's charts render the
// remote profile: no istiod Deployment.
func TestIntegrationRemoteNamesItsControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: starts etcd and kube-apiserver")
	}
	charts := chartsDir(t)
	cfg := testenv.New(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	plan, err := model.NewPlan(model.Request{Specs: []model.Spec{
		{Name: "cluster1", Network: "network1"},
		{Name: "cluster2", Network: "network1", PrimaryClusterName: "cluster1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := values.New(values.WithIstiodAddress("cluster1", "192.0.2.10")).Render(plan, "cluster2") // TEST-NET-1: never contacted
	if err != nil {
		t.Fatal(err)
	}
	tgt := Target{Target: installer.Target{Cluster: "cluster2", Kubeconfig: kubeconfigFor(t, cfg), Values: Images{}.Apply(rendered[0].Values)}, Primary: "cluster1"}
	res, err := New(WithCharts(charts), WithWait(false)).Install(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed() {
		t.Fatalf("install: %+v", res)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "istio-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Annotations[ControlPlaneClustersAnnotation]; got != "cluster1" {
		t.Errorf("istio-system annotation %s = %q, want cluster1", ControlPlaneClustersAnnotation, got)
	}
	if _, err := cs.AppsV1().Deployments("istio-system").Get(ctx, "istiod", metav1.GetOptions{}); err == nil {
		t.Error("the remote runs an istiod of its own; want the remote profile")
	}
}

// TestIntegrationIstioAmbient installs Istio's real charts in ambient mode
// against a real kube-apiserver, with the values `values render --profile
// ambient` gives cluster1: istio-base, istiod with ambient on, istio-cni's
// node DaemonSet, and Istio's ztunnel chart running meshctl's proxy under
// ztunnel's names. A rerun changes nothing; uninstall removes all four,
// ztunnel first.
func TestIntegrationIstioAmbient(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: starts etcd and kube-apiserver")
	}
	charts := chartsDir(t)
	cfg := testenv.New(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	tgt := Target{Target: installer.Target{Cluster: "cluster1", Kubeconfig: kubeconfigFor(t, cfg), Values: ambientValues(t)}, Primary: "cluster1", Ztunnel: testZtunnel}
	in := New(WithCharts(charts), WithWait(false), WithAmbient(true))

	res, err := in.Install(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	if got := releaseActions(res.Clusters[0]); got != "istio-base=installed istiod=installed istio-cni=installed ztunnel=installed" || res.Failed() {
		t.Fatalf("install: %s (%+v)", got, res)
	}
	zt, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "ztunnel", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Istio's tools find ztunnel as DaemonSet istio-system/ztunnel: %v", err)
	}
	pod := zt.Spec.Template
	c := pod.Spec.Containers[0]
	if pod.Spec.ServiceAccountName != "ztunnel" || pod.Labels["app"] != "ztunnel" {
		t.Errorf("ztunnel pods: service account %q, app=%q; want ztunnel, ztunnel (istiod trusts istio-system/ztunnel)", pod.Spec.ServiceAccountName, pod.Labels["app"])
	}
	if c.Image != testZtunnel.Image || strings.Join(c.Args, " ") != "proxy ztunnel" || c.ImagePullPolicy != "IfNotPresent" {
		t.Errorf("ztunnel runs %s %q (%s), want meshctl's proxy %s with the chart's arguments, IfNotPresent", c.Image, c.Args, c.ImagePullPolicy, testZtunnel.Image)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntValue() != 15021 || p.HTTPGet.Path != "/healthz/ready" {
		t.Errorf("ztunnel readiness %+v, want /healthz/ready on 15021", p)
	}
	if pod.Annotations[ZtunnelImageIDAnnotation] != testZtunnel.ImageID {
		t.Errorf("ztunnel pods' %s = %q, want %s", ZtunnelImageIDAnnotation, pod.Annotations[ZtunnelImageIDAnnotation], testZtunnel.ImageID)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["XDS_ADDRESS"] != "istiod.istio-system.svc:15012" || env["CA_ADDRESS"] != "istiod.istio-system.svc:15012" || env["ISTIO_META_CLUSTER_ID"] != "cluster1" || env["MESHCTL_MESH_CIDRS"] == "" {
		t.Errorf("ztunnel env %v: want istiod's XDS and CA, cluster1, the mesh CIDRs", env)
	}
	if _, err := cs.CoreV1().ServiceAccounts("istio-system").Get(ctx, "ztunnel", metav1.GetOptions{}); err != nil {
		t.Errorf("service account istio-system/ztunnel: %v", err)
	}
	cni, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "istio-cni-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("istio-cni's DaemonSet: %v", err)
	}
	if img := cni.Spec.Template.Spec.Containers[0].Image; img != "meshctl/install-cni:"+Version {
		t.Errorf("istio-cni runs %s, want the offline build meshctl/install-cni:%s", img, Version)
	}
	cm, err := cs.CoreV1().ConfigMaps("istio-system").Get(ctx, "istio-cni-config", metav1.GetOptions{})
	if err != nil || cm.Data["AMBIENT_ENABLED"] != "true" || cm.Data["AMBIENT_DNS_CAPTURE"] != "false" {
		t.Errorf("istio-cni-config AMBIENT_ENABLED, AMBIENT_DNS_CAPTURE: %v %v, want true, false (meshctl's proxy serves no DNS)", cm.Data, err)
	}
	// istiod gives the cluster's workloads the network the Istio
	// namespace's label names, ztunnel its own from global.network.
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "istio-system", metav1.GetOptions{})
	if want := tgt.Values["global"].(map[string]any)["network"]; err != nil || want == "" || ns.Labels[NetworkLabel] != want {
		t.Errorf("istio-system labels %v (%v): want %s=%v", ns.Labels, err, NetworkLabel, want)
	}
	d, err := cs.AppsV1().Deployments("istio-system").Get(ctx, "istiod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ienv := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		ienv[e.Name] = e.Value
	}
	if ienv["PILOT_ENABLE_AMBIENT"] != "true" || ienv["CA_TRUSTED_NODE_ACCOUNTS"] != "istio-system/ztunnel" {
		t.Errorf("istiod PILOT_ENABLE_AMBIENT %q CA_TRUSTED_NODE_ACCOUNTS %q, want true, istio-system/ztunnel", ienv["PILOT_ENABLE_AMBIENT"], ienv["CA_TRUSTED_NODE_ACCOUNTS"])
	}

	res, err = in.Install(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	if got := releaseActions(res.Clusters[0]); got != "istio-base=unchanged istiod=unchanged istio-cni=unchanged ztunnel=unchanged" {
		t.Fatalf("rerun: %s (%+v)", got, res)
	}
	again, _ := cs.AppsV1().DaemonSets("istio-system").Get(ctx, "ztunnel", metav1.GetOptions{})
	if again.ResourceVersion != zt.ResourceVersion {
		t.Errorf("rerun changed ztunnel (resourceVersion %s -> %s)", zt.ResourceVersion, again.ResourceVersion)
	}

	un, err := New().Uninstall(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	if got := releaseActions(un.Clusters[0]); got != "ztunnel=uninstalled istio-cni=uninstalled istiod=uninstalled istio-base=uninstalled" {
		t.Fatalf("uninstall: %s (%+v)", got, un)
	}
	for _, ds := range []string{"ztunnel", "istio-cni-node"} {
		if _, err := cs.AppsV1().DaemonSets("istio-system").Get(ctx, ds, metav1.GetOptions{}); err == nil {
			t.Errorf("DaemonSet %s is still there after uninstall", ds)
		}
	}
}
