package remotesecret

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// envSource serves two testenv API servers as an environment. The internal
// kubeconfig is the host one: both servers listen on loopback.
type envSource struct {
	clusters    []model.ClusterPlan
	kubeconfigs map[string][]byte
	broken      string // a cluster whose kubeconfig cannot be read
	// moved gives a cluster's internal kubeconfig another server: its
	// node got a new address on the kind network (a Docker restart).
	moved map[string]string
}

func (s *envSource) Environment(context.Context, string) ([]model.ClusterState, error) {
	out := make([]model.ClusterState, len(s.clusters))
	for i, c := range s.clusters {
		out[i].ClusterPlan = c
	}
	return out, nil
}

func (s *envSource) ClusterKubeconfig(_ context.Context, c model.ClusterPlan, internal bool) ([]byte, error) {
	if c.Name == s.broken {
		return nil, fmt.Errorf("node container is gone")
	}
	kc, ok := s.kubeconfigs[c.Name]
	if !ok {
		return nil, fmt.Errorf("no cluster %q", c.Name)
	}
	if server := s.moved[c.Name]; internal && server != "" {
		return testenv.WithServer(kc, c.Name, server)
	}
	return kc, nil
}

// startClusters starts a real API server for each planned cluster, with
// kube-controller-manager's token controller (testenv starts that
// controller only), and serves them as environment "it". A plan's empty
// fields get what a kind cluster of one network has: kind name
// it-<name>, network-1, its own primary and config cluster, one control
// plane. It returns each cluster's admin client and rest.Config.
func startClusters(t *testing.T, plans ...model.ClusterPlan) (*envSource, map[string]kubernetes.Interface, map[string]*rest.Config) {
	t.Helper()
	src := &envSource{kubeconfigs: map[string][]byte{}, moved: map[string]string{}}
	clients, cfgs := map[string]kubernetes.Interface{}, map[string]*rest.Config{}
	for _, c := range plans {
		if c.KindName == "" && !c.Existing {
			c.KindName = "it-" + c.Name
		}
		if c.ControlPlanes == 0 && !c.Existing {
			c.ControlPlanes = 1
		}
		if c.Network == "" {
			c.Network = "network-1"
		}
		if c.PrimaryClusterName == "" {
			c.PrimaryClusterName = c.Name
		}
		if c.ConfigClusterName == "" {
			c.ConfigClusterName = c.Name
		}
		cfgs[c.Name] = testenv.NewWithControllers(t, "serviceaccount-token-controller")
		clients[c.Name] = kubernetes.NewForConfigOrDie(cfgs[c.Name])
		src.kubeconfigs[c.Name] = testenv.Kubeconfig(t, c.Name, cfgs[c.Name])
		src.clusters = append(src.clusters, c)
	}
	return src, clients, cfgs
}

// TestIntegrationEnsure creates remote secrets between two real API servers,
// each with kube-controller-manager's token controller (testenv starts it
// with that controller only), and proves them: each secret's kubeconfig
// reaches the other server as the reader, which may read what istiod reads
// and nothing more. Re-runs change nothing and add no token; a damaged
// secret is repaired in place; a recreated reader account gets a fresh
// token.
func TestIntegrationEnsure(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	src, clients, cfgs := startClusters(t, model.ClusterPlan{Name: "cluster1"}, model.ClusterPlan{Name: "cluster2"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A cluster that cannot be resolved fails the run before anything is written.
	src.broken = "cluster2"
	_, err := New(src).Ensure(ctx, "it")
	if err == nil || !strings.Contains(err.Error(), `cluster "cluster2"`) {
		t.Fatalf("broken cluster2: err %v, want one naming it", err)
	}
	if _, err := clients["cluster1"].CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("cluster1 was changed although cluster2 could not be resolved (namespace: %v)", err)
	}
	src.broken = ""

	// cluster1 was brought up by an earlier meshctl: its reader took the
	// name Istio's base chart owns. The run replaces it.
	legacy := metav1.ObjectMeta{Name: legacyReader.serviceAccount, Namespace: Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "meshctl"}}
	if _, err := clients["cluster1"].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := clients["cluster1"].CoreV1().ServiceAccounts(Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: legacy}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	m := New(src, WithTimeout(30*time.Second))
	res, err := m.Ensure(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clients["cluster1"].CoreV1().ServiceAccounts(Namespace).Get(ctx, legacyReader.serviceAccount, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("meshctl's old reader %s is still there (err %v): Istio's base chart cannot be installed over it", legacyReader.serviceAccount, err)
	}
	if got := actions(res); got != "readers cluster1:created cluster2:created; secrets cluster2→cluster1:created cluster1→cluster2:created" {
		t.Errorf("first run: %s", got)
	}
	for _, p := range [][2]string{{"cluster1", "cluster2"}, {"cluster2", "cluster1"}} {
		source, target := p[0], p[1]
		checkRemoteSecret(ctx, t, clients[target], source, cfgs[source].Host)
	}

	// A re-run changes nothing and makes no second token: no object it
	// manages is written (their resource versions stay).
	before := managedVersions(ctx, t, clients)
	res, err = m.Ensure(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res); got != "readers cluster1:reused cluster2:reused; secrets cluster2→cluster1:unchanged cluster1→cluster2:unchanged" {
		t.Errorf("second run: %s", got)
	}
	if after := managedVersions(ctx, t, clients); after != before {
		t.Errorf("a re-run wrote objects:\n before %s\n after  %s", before, after)
	}
	for name, c := range clients {
		if n := tokenSecrets(ctx, t, c); n != 1 {
			t.Errorf("%s has %d token secrets after two runs, want 1", name, n)
		}
	}

	// A damaged secret is repaired in place: same object, exactly one key.
	sec, err := clients["cluster2"].CoreV1().Secrets(Namespace).Get(ctx, SecretPrefix+"cluster1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := sec.UID
	sec.Data["stale-cluster"] = []byte("x")
	sec.Annotations[ClusterAnnotation] = "wrong"
	if _, err := clients["cluster2"].CoreV1().Secrets(Namespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = m.Ensure(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res); got != "readers cluster1:reused cluster2:reused; secrets cluster2→cluster1:unchanged cluster1→cluster2:updated" {
		t.Errorf("repair run: %s", got)
	}
	if s := checkRemoteSecret(ctx, t, clients["cluster2"], "cluster1", cfgs["cluster1"].Host); s.UID != uid {
		t.Error("the damaged secret was replaced, not updated in place")
	}

	// A deleted remote secret is made again.
	if err := clients["cluster1"].CoreV1().Secrets(Namespace).Delete(ctx, SecretPrefix+"cluster2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = m.Ensure(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res); got != "readers cluster1:reused cluster2:reused; secrets cluster2→cluster1:created cluster1→cluster2:unchanged" {
		t.Errorf("after deleting cluster2's secret in cluster1: %s", got)
	}
	checkRemoteSecret(ctx, t, clients["cluster1"], "cluster2", cfgs["cluster2"].Host)

	// What `meshctl remote-secret` prints is what was installed.
	printed, err := m.Secret(ctx, "it", "it-cluster1")
	if err != nil {
		t.Fatal(err)
	}
	installed, _ := clients["cluster2"].CoreV1().Secrets(Namespace).Get(ctx, SecretPrefix+"cluster1", metav1.GetOptions{})
	if !same(installed, printed) {
		t.Error("Secret differs from the installed remote secret")
	}
	if _, err := m.Secret(ctx, "it", "cluster9"); err == nil || !strings.Contains(err.Error(), `no cluster "cluster9" in environment "it" (it has cluster1, cluster2)`) {
		t.Errorf("unknown cluster: %v", err)
	}

	// A reader account deleted and recreated (Istio's charts reinstalled,
	// say) gets a fresh token: the old one no longer authenticates.
	if err := clients["cluster1"].CoreV1().ServiceAccounts(Namespace).Delete(ctx, ServiceAccount, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = m.Ensure(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res); got != "readers cluster1:created cluster2:reused; secrets cluster2→cluster1:unchanged cluster1→cluster2:updated" {
		t.Errorf("after recreating cluster1's reader: %s", got)
	}
	checkRemoteSecret(ctx, t, clients["cluster2"], "cluster1", cfgs["cluster1"].Host)
	if n := tokenSecrets(ctx, t, clients["cluster1"]); n != 1 {
		t.Errorf("cluster1 has %d token secrets, want 1", n)
	}

}

// TestIntegrationNoTokenController: on an API server without
// kube-controller-manager the token never comes, and the wait ends with the
// cluster named and the likely cause.
func TestIntegrationNoTokenController(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := testenv.New(t)
	src := &envSource{
		clusters:    []model.ClusterPlan{{Name: "lonely", KindName: "it-lonely", PrimaryClusterName: "lonely", ConfigClusterName: "lonely"}},
		kubeconfigs: map[string][]byte{"lonely": testenv.Kubeconfig(t, "lonely", cfg)},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := New(src, WithTimeout(time.Second)).Secret(ctx, "it", "lonely")
	if err == nil || !strings.Contains(err.Error(), `cluster "lonely"`) || !strings.Contains(err.Error(), "kube-controller-manager") {
		t.Errorf("no token controller: %v", err)
	}
}

func actions(r *Result) string {
	var rs, ss []string
	for _, x := range r.Readers {
		rs = append(rs, x.Cluster+":"+x.Action)
	}
	for _, x := range r.Secrets {
		ss = append(ss, x.Cluster+"→"+x.Target+":"+x.Action)
	}
	return "readers " + strings.Join(rs, " ") + "; secrets " + strings.Join(ss, " ")
}

func tokenSecrets(ctx context.Context, t *testing.T, c kubernetes.Interface) int {
	t.Helper()
	list, err := c.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeServiceAccountToken)})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// checkRemoteSecret reads source's remote secret from target and uses its
// kubeconfig against source's API server: the reader may list pods, secrets
// and nodes cluster-wide and create token reviews, and may not write.
func checkRemoteSecret(ctx context.Context, t *testing.T, target kubernetes.Interface, source, server string) *corev1.Secret {
	t.Helper()
	s, err := target.CoreV1().Secrets(Namespace).Get(ctx, SecretPrefix+source, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("remote secret of %s: %v", source, err)
	}
	if s.Labels[MultiClusterLabel] != "true" || s.Annotations[ClusterAnnotation] != source || len(s.Data) != 1 {
		t.Fatalf("remote secret of %s: labels %v, annotations %v, %d keys", source, s.Labels, s.Annotations, len(s.Data))
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[source])
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != server {
		t.Errorf("remote secret of %s points at %s, want %s", source, cfg.Host, server)
	}
	reader := kubernetes.NewForConfigOrDie(cfg)
	if _, err := reader.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("reader of %s cannot list pods: %v", source, err)
	}
	if _, err := reader.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("reader of %s cannot list secrets: %v", source, err)
	}
	if _, err := reader.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("reader of %s cannot list nodes: %v", source, err)
	}
	_, err = reader.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("reader of %s may create a configmap (err %v): it must only read", source, err)
	}
	return s
}

// TestIntegrationServerByName: with WithServerByName a kind cluster's
// secret names its API server by container name, which survives a Docker
// restart; a secret written with the old address is updated in place.
func TestIntegrationServerByName(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	src, clients, _ := startClusters(t, model.ClusterPlan{Name: "cluster1"}, model.ClusterPlan{Name: "cluster2"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := New(src, WithTimeout(30*time.Second)).Ensure(ctx, "it"); err != nil {
		t.Fatal(err)
	}
	res, err := New(src, WithTimeout(30*time.Second), WithServerByName(true)).Ensure(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(res); got != "readers cluster1:reused cluster2:reused; secrets cluster2→cluster1:updated cluster1→cluster2:updated" {
		t.Errorf("by name: %s", got)
	}
	s, err := clients["cluster1"].CoreV1().Secrets(Namespace).Get(ctx, SecretPrefix+"cluster2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["cluster2"])
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://it-cluster2-control-plane:6443" {
		t.Errorf("server %s, want https://it-cluster2-control-plane:6443", cfg.Host)
	}
	// remote-secret prints what up installed: in an environment of IPv4
	// kind clusters, by name.
	printed, err := New(src, WithServerByName(true)).Secret(ctx, "it", "cluster2")
	if err != nil {
		t.Fatal(err)
	}
	if !same(s, printed) {
		t.Errorf("Secret(cluster2) names %s, installed %s", serverOf(t, printed, "cluster2"), cfg.Host)
	}
}

// TestIntegrationServerByAddressForIPv6: an IPv6-only kind cluster's pods
// cannot resolve kind's node names (kind forwards DNS to Docker's resolver
// from the IPv4 gateway only), so the remote secrets it holds name the
// other clusters' API servers by address; the secrets other clusters hold
// of it still name it by container name.
func TestIntegrationServerByAddressForIPv6(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	src, clients, cfgs := startClusters(t, model.ClusterPlan{Name: "cluster1", IPFamily: model.IPv4}, model.ClusterPlan{Name: "cluster2", IPFamily: model.IPv6})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := New(src, WithTimeout(30*time.Second), WithServerByName(true))
	res, err := m.Ensure(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // target cluster -> the server its secret names
		"cluster1": "https://it-cluster2-control-plane:6443",
		"cluster2": cfgs["cluster1"].Host,
	}
	for target, server := range want {
		source := map[string]string{"cluster1": "cluster2", "cluster2": "cluster1"}[target]
		s, err := clients[target].CoreV1().Secrets(Namespace).Get(ctx, SecretPrefix+source, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[source])
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != server {
			t.Errorf("%s's secret of %s names %s, want %s", target, source, cfg.Host, server)
		}
		// remote-secret prints what up installed (it used to name
		// cluster1 by container name, which cluster2's pods cannot
		// resolve).
		printed, err := m.Secret(ctx, "it", source)
		if err != nil {
			t.Fatal(err)
		}
		if got := serverOf(t, printed, source); got != server {
			t.Errorf("Secret(%s) names %s, want %s, as installed in %s", source, got, server, target)
		}
	}
	for _, r := range res.Secrets {
		if r.Server != want[r.Target] {
			t.Errorf("result: %s's secret of %s names %s, want %s", r.Target, r.Cluster, r.Server, want[r.Target])
		}
	}
}

// TestIntegrationRemoteReaderManagesWebhooks: the reader of a remote (its
// control plane is another cluster's istiod) may do what Istio's reader role
// grants in a remote — list and patch the webhooks, keep ConfigMaps — while
// a primary's reader still only reads. Found on kind: with read-only rules
// the primary's istiod never synced the remote (/debug/clusterz `timeout`)
// and the remote's injection webhook kept no CA bundle.
func TestIntegrationRemoteReaderManagesWebhooks(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	src, _, _ := startClusters(t, model.ClusterPlan{Name: "cluster1"},
		model.ClusterPlan{Name: "cluster2", PrimaryClusterName: "cluster1", ConfigClusterName: "cluster1"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := New(src, WithTimeout(30*time.Second))
	if _, err := m.Ensure(ctx, "it"); err != nil {
		t.Fatal(err)
	}
	// The primary has no remote secret for itself; print cluster1's to test
	// its reader.
	for _, name := range []string{"cluster1", "cluster2"} {
		s, err := m.Secret(ctx, "it", name)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[name])
		if err != nil {
			t.Fatal(err)
		}
		reader := kubernetes.NewForConfigOrDie(cfg)
		_, listErr := reader.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
		_, cmErr := reader.CoreV1().ConfigMaps(Namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lock-" + name}}, metav1.CreateOptions{})
		switch name {
		case "cluster2": // the remote
			if listErr != nil || cmErr != nil {
				t.Errorf("the remote's reader cannot do what its primary's istiod needs: list webhooks: %v; create configmap: %v", listErr, cmErr)
			}
		default:
			if !apierrors.IsForbidden(listErr) || !apierrors.IsForbidden(cmErr) {
				t.Errorf("the primary's reader may list webhooks (%v) or create configmaps (%v): it must only read", listErr, cmErr)
			}
		}
	}
}

// managedVersions lists the resource versions of what Ensure manages in
// each cluster: the namespace, the reader's account, token, role and
// binding, and the remote secrets.
func managedVersions(ctx context.Context, t *testing.T, clients map[string]kubernetes.Interface) string {
	t.Helper()
	var b strings.Builder
	for _, name := range []string{"cluster1", "cluster2"} {
		c := clients[name]
		objs := []func() (metav1.Object, error){
			func() (metav1.Object, error) { return c.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}) },
			func() (metav1.Object, error) {
				return c.CoreV1().ServiceAccounts(Namespace).Get(ctx, ServiceAccount, metav1.GetOptions{})
			},
			func() (metav1.Object, error) {
				return c.RbacV1().ClusterRoles().Get(ctx, ClusterRole, metav1.GetOptions{})
			},
			func() (metav1.Object, error) {
				return c.RbacV1().ClusterRoleBindings().Get(ctx, ClusterRole, metav1.GetOptions{})
			},
		}
		for _, get := range objs {
			o, err := get()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s/%s=%s ", name, o.GetName(), o.GetResourceVersion())
		}
		secrets, err := c.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets.Items {
			fmt.Fprintf(&b, "%s/%s=%s ", name, s.Name, s.ResourceVersion)
		}
	}
	return b.String()
}

// TestIntegrationCheck: Check finds each remote secret Ensure installs as
// Ensure would write it now, on real API servers: missing before Ensure
// (and writing nothing), current after it, stale in the IPv6-only and the
// existing cluster once cluster1's node moved (their secrets name it by
// address), missing and stale after damage, an unreachable cluster
// reported on its own secrets only, and current again after a rerun of
// Ensure. Its result never holds a token.
func TestIntegrationCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	src, clients, cfgs := startClusters(t,
		model.ClusterPlan{Name: "cluster1", IPFamily: model.IPv4},
		model.ClusterPlan{Name: "cluster2", IPFamily: model.IPv6},
		model.ClusterPlan{Name: "cluster3", IPFamily: model.IPv4, Existing: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := New(src, WithTimeout(30*time.Second), WithServerByName(true))

	chk, err := m.Check(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	if chk.AnyInstalled() {
		t.Errorf("before Ensure: some secret installed: %s", checkStates(chk))
	}
	if got := checkStates(chk); got != "cluster2→cluster1:missing cluster3→cluster1:missing cluster1→cluster2:missing cluster3→cluster2:missing cluster1→cluster3:missing cluster2→cluster3:missing" {
		t.Errorf("before Ensure: %s", got)
	}
	if _, err := clients["cluster1"].CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Check wrote into cluster1 (namespace %s: %v)", Namespace, err)
	}

	res, err := m.Ensure(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	chk, err = m.Check(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	if got := checkStates(chk); got != "cluster2→cluster1:current cluster3→cluster1:current cluster1→cluster2:current cluster3→cluster2:current cluster1→cluster3:current cluster2→cluster3:current" {
		t.Errorf("after Ensure: %s", got)
	}
	// Check's server is Ensure's, secret by secret: one choice, made once.
	for i, s := range chk.Secrets {
		if w := res.Secrets[i]; s.Server != w.Server || s.Installed != w.Server || s.Secret != w.Secret {
			t.Errorf("%s in %s: Check says server %s, installed %s; Ensure wrote %s", s.Secret, s.Target, s.Server, s.Installed, w.Server)
		}
	}

	// cluster1's node comes back on another address: the IPv6-only and
	// the existing cluster hold it by its old address; cluster2 and
	// cluster3 did not move.
	const moved = "https://172.18.0.9:6443"
	src.moved["cluster1"] = moved
	// Damage: cluster2 lost its secret of cluster3; cluster1's secret of
	// cluster2 holds no kubeconfig for it.
	if err := clients["cluster2"].CoreV1().Secrets(Namespace).Delete(ctx, SecretPrefix+"cluster3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sec, err := clients["cluster1"].CoreV1().Secrets(Namespace).Get(ctx, SecretPrefix+"cluster2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tokenOf(t, sec, "cluster2")
	sec.Data = map[string][]byte{"cluster9": sec.Data["cluster2"]}
	if _, err := clients["cluster1"].CoreV1().Secrets(Namespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	chk, err = m.Check(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	if got := checkStates(chk); got != "cluster2→cluster1:stale cluster3→cluster1:current cluster1→cluster2:stale cluster3→cluster2:missing cluster1→cluster3:stale cluster2→cluster3:current" {
		t.Errorf("after the move and the damage: %s", got)
	}
	for _, s := range chk.Secrets {
		want := map[string]string{"cluster2→cluster1": "", "cluster1→cluster2": cfgs["cluster1"].Host, "cluster1→cluster3": cfgs["cluster1"].Host}[s.Cluster+"→"+s.Target]
		if s.State == SecretStale && (s.Installed != want || s.Server != moved && s.Cluster == "cluster1") {
			t.Errorf("%s in %s: installed %q, server %q; want installed %q, server %s", s.Secret, s.Target, s.Installed, s.Server, want, moved)
		}
	}
	if out, _ := json.Marshal(chk); strings.Contains(string(out), token) {
		t.Error("Check's result holds a reader token")
	}

	// A cluster that cannot be resolved fails its own secrets, not the
	// others'.
	src.broken = "cluster3"
	chk, err = m.Check(ctx, "it")
	if err != nil {
		t.Fatalf("one unreachable cluster failed the whole check: %v", err)
	}
	for _, s := range chk.Secrets {
		involved := s.Cluster == "cluster3" || s.Target == "cluster3"
		if involved != (s.Error != "") || involved && !strings.Contains(s.Error, `cluster "cluster3"`) {
			t.Errorf("%s in %s: state %q, error %q", s.Secret, s.Target, s.State, s.Error)
		}
	}
	src.broken = ""

	// A rerun heals: every secret as Ensure writes it now.
	if _, err := m.Ensure(ctx, "it"); err != nil {
		t.Fatal(err)
	}
	chk, err = m.Check(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	if got := checkStates(chk); got != "cluster2→cluster1:current cluster3→cluster1:current cluster1→cluster2:current cluster3→cluster2:current cluster1→cluster3:current cluster2→cluster3:current" {
		t.Errorf("after the rerun: %s", got)
	}

	// remote-secret prints what Ensure installed: --for a holder exactly
	// its secret; by default, with an IPv6-only or existing holder, the
	// address.
	for _, s := range res.Secrets {
		printed, err := m.Secret(ctx, "it", s.Cluster, For(s.Target))
		if err != nil {
			t.Fatal(err)
		}
		installed, err := clients[s.Target].CoreV1().Secrets(Namespace).Get(ctx, SecretPrefix+s.Cluster, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !same(installed, printed) {
			t.Errorf("Secret(%s, For(%s)) differs from the one installed there", s.Cluster, s.Target)
		}
	}
	printed, err := m.Secret(ctx, "it", "cluster1")
	if err != nil {
		t.Fatal(err)
	}
	if got := serverOf(t, printed, "cluster1"); got != moved {
		t.Errorf("Secret(cluster1) names %s, want its address %s", got, moved)
	}
	if _, err := m.Secret(ctx, "it", "cluster1", For("cluster1")); err == nil || !strings.Contains(err.Error(), "itself") {
		t.Errorf("For itself: %v", err)
	}
	if _, err := m.Secret(ctx, "it", "cluster1", For("cluster9")); err == nil || !strings.Contains(err.Error(), `no cluster "cluster9"`) {
		t.Errorf("For an unknown cluster: %v", err)
	}
}

// checkStates lists each secret Check found as source→target:state.
func checkStates(r *CheckResult) string {
	var out []string
	for _, s := range r.Secrets {
		state := s.State
		if s.Error != "" {
			state = "error"
		}
		out = append(out, s.Cluster+"→"+s.Target+":"+state)
	}
	return strings.Join(out, " ")
}

func serverOf(t *testing.T, s *corev1.Secret, source string) string {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[source])
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Host
}

func tokenOf(t *testing.T, s *corev1.Secret, source string) string {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[source])
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BearerToken == "" {
		t.Fatalf("remote secret of %s holds no token", source)
	}
	return cfg.BearerToken
}
