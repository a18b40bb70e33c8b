package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// existingCluster is a real kube-apiserver standing in for an existing
// cluster, with a kubeconfig file on disk as a user would have one.
type existingCluster struct {
	cfg        *rest.Config
	cs         *kubernetes.Clientset
	dir        string
	kubeconfig string
}

// newExistingCluster starts a testenv and writes its kubeconfig: context
// "admin" (the client certificate; its CA in a file beside the kubeconfig,
// referenced by a relative path as kubeadm's admin.conf users often have
// it), current-context "elsewhere" pointing at nothing, so that a check
// that ignores meta.context fails.
func newExistingCluster(t *testing.T) *existingCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := testenv.New(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &existingCluster{cfg: cfg, cs: cs, dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(e.dir, "ca.crt"), cfg.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: "ca.crt"}
	kc.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["admin"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
	kc.Contexts["elsewhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: "admin"}
	kc.CurrentContext = "elsewhere"
	e.kubeconfig = filepath.Join(e.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, e.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return e
}

// addTokenContext adds a context that authenticates with token.
func (e *existingCluster) addTokenContext(t *testing.T, name, token string) {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: name}
	if err := clientcmd.WriteToFile(*kc, e.kubeconfig); err != nil {
		t.Fatal(err)
	}
}

// serviceAccountToken creates a service account bound to rules (none: it
// may do only what every authenticated user may) and returns its token.
func (e *existingCluster) serviceAccountToken(t *testing.T, name string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	if _, err := e.cs.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(rules) > 0 {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
		if _, err := e.cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "default"}},
		}
		if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := e.cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// addNode registers a node as kubelet would, with its pod CIDRs as
// kube-controller-manager would have allocated them.
func (e *existingCluster) addNode(t *testing.T, name string, podCIDRs ...string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: podCIDRs[0], PodCIDRs: podCIDRs}}
	if _, err := e.cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// plan makes a one-topology plan from entries, with the topology file in
// the kubeconfig's directory so that relative paths are exercised.
func (e *existingCluster) plan(t *testing.T, env, topology string) *model.Plan {
	t.Helper()
	path := filepath.Join(e.dir, "topology.json")
	if err := os.WriteFile(path, []byte(topology), 0o600); err != nil {
		t.Fatal(err)
	}
	specs, err := model.LoadTopology(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := model.NewPlan(model.Request{Env: env, Specs: specs, Registry: model.Registry{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// everything meshctl checks it may do in an existing cluster, and no more.
var meshctlRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}},
	{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get"}},
	{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"create"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "update", "delete"}},
}

// TestIntegrationExistingChecks checks and discovers existing clusters
// against a real API server, and reports every bad one at once.
func TestIntegrationExistingChecks(t *testing.T) {
	e := newExistingCluster(t)
	e.addNode(t, "node-a", "10.244.0.0/24", "fd00:10:244::/64")
	e.addNode(t, "node-b", "10.244.1.0/24", "fd00:10:244:1::/64")
	e.addTokenContext(t, "restricted", e.serviceAccountToken(t, "restricted", meshctlRules))
	e.addTokenContext(t, "powerless", e.serviceAccountToken(t, "powerless", nil))
	e.addTokenContext(t, "bad-token", "not-a-valid-token")
	p := NewProvider(ProviderWithArtifacts(t.TempDir()))
	ctx := context.Background()

	t.Run("discovers", func(t *testing.T) {
		plan := e.plan(t, "ex", `[{"clusterName": "ext", "network": "far", "meta": {"kubeconfig": "kubeconfig", "context": "admin"}}]`)
		found, err := p.CheckExisting(ctx, plan)
		if err != nil {
			t.Fatal(err)
		}
		if len(found) != 1 {
			t.Fatalf("found %d clusters, want 1", len(found))
		}
		c := found[0]
		if !reflect.DeepEqual(plan.Clusters[0], c.ClusterPlan) {
			t.Errorf("plan %+v, want it completed with what was found: %+v", plan.Clusters[0], c.ClusterPlan)
		}
		d := c.Discovery
		if d == nil || d.Server != e.cfg.Host || !strings.HasPrefix(d.Version, "v1.") || d.Nodes != 2 {
			t.Fatalf("discovery %+v", d)
		}
		want := []string{"10.244.0.0/24", "10.244.1.0/24", "fd00:10:244:1::/64", "fd00:10:244::/64"}
		if !slices.Equal(c.PodSubnets, want) || !strings.Contains(d.PodSubnetsFrom, "spec.podCIDRs") {
			t.Errorf("pod subnets %v from %q, want %v", c.PodSubnets, d.PodSubnetsFrom, want)
		}
		// testenv runs kube-apiserver with --service-cluster-ip-range=10.0.0.0/24.
		if !slices.Equal(c.ServiceSubnets, []string{"10.0.0.0/24"}) || d.ServiceSubnetsInferred || !strings.Contains(d.ServiceSubnetsFrom, "ServiceCIDR") {
			t.Errorf("service subnets %v from %q", c.ServiceSubnets, d.ServiceSubnetsFrom)
		}
		if c.IPFamily != model.Dual {
			t.Errorf("family %q, want dual", c.IPFamily)
		}
		// Checking changes nothing.
		if _, err := e.cs.CoreV1().Namespaces().Get(ctx, model.ClaimNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a check created namespace %s: %v", model.ClaimNamespace, err)
		}
	})

	t.Run("infers the service CIDR without the ServiceCIDR API", func(t *testing.T) {
		// This user may not read ServiceCIDRs, as on a cluster that does
		// not serve them: the range comes from the kubernetes Service.
		plan := e.plan(t, "ex", `[{"clusterName": "ext", "meta": {"kubeconfig": "kubeconfig", "context": "restricted"}}]`)
		found, err := p.CheckExisting(ctx, plan)
		if err != nil {
			t.Fatal(err)
		}
		c := found[0]
		if !slices.Equal(c.ServiceSubnets, []string{"10.0.0.0/12"}) || !c.Discovery.ServiceSubnetsInferred || !strings.Contains(c.Discovery.ServiceSubnetsFrom, "inferred from Service default/kubernetes ClusterIP 10.0.0.1") {
			t.Errorf("service subnets %v, discovery %+v", c.ServiceSubnets, c.Discovery)
		}
		// A stated range is checked against the address, not the bound.
		plan = e.plan(t, "ex", `[{"clusterName": "ext", "svcSubnet": "10.0.0.0/24", "meta": {"kubeconfig": "kubeconfig", "context": "restricted"}},
			{"clusterName": "off", "network": "b", "svcSubnet": "10.1.0.0/24", "meta": {"kubeconfig": "kubeconfig", "context": "restricted"}}]`)
		_, err = p.CheckExisting(ctx, plan)
		if err == nil || !strings.Contains(err.Error(), `cluster "off": svcSubnet 10.1.0.0/24 stated in the topology does not contain 10.0.0.1/32`) || strings.Contains(err.Error(), `"ext"`) {
			t.Errorf("error %v", err)
		}
	})

	t.Run("stated subnets are checked", func(t *testing.T) {
		plan := e.plan(t, "ex", `[{"clusterName": "ok", "network": "a", "podSubnet": "10.244.0.0/16,fd00:10:244::/56", "meta": {"kubeconfig": "kubeconfig", "context": "admin"}},
			{"clusterName": "wrong", "network": "b", "podSubnet": "10.99.0.0/16", "meta": {"kubeconfig": "kubeconfig", "context": "admin"}}]`)
		_, err := p.CheckExisting(ctx, plan)
		if err == nil || !strings.Contains(err.Error(), `cluster "wrong": podSubnet 10.99.0.0/16 stated in the topology does not contain 10.244.0.0/24`) || strings.Contains(err.Error(), `"ok"`) {
			t.Fatalf("error %v", err)
		}
	})

	t.Run("bad input, every cluster reported at once", func(t *testing.T) {
		closed, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closedPort := closed.Addr().(*net.TCPAddr).Port
		closed.Close()
		unreachable := filepath.Join(e.dir, "unreachable.kubeconfig")
		kc := clientcmdapi.NewConfig()
		kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:" + itoa(closedPort), InsecureSkipTLSVerify: true}
		kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
		kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
		kc.CurrentContext = "c"
		if err := clientcmd.WriteToFile(*kc, unreachable); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.dir, "garbage"), []byte("{not yaml: ["), 0o600); err != nil {
			t.Fatal(err)
		}
		plan := e.plan(t, "ex", `[
			{"clusterName": "fine", "network": "n1", "meta": {"kubeconfig": "kubeconfig", "context": "admin"}},
			{"clusterName": "no-file", "network": "n2", "meta": {"kubeconfig": "does-not-exist"}},
			{"clusterName": "not-kubeconfig", "network": "n3", "meta": {"kubeconfig": "garbage"}},
			{"clusterName": "no-context", "network": "n4", "meta": {"kubeconfig": "kubeconfig", "context": "nope"}},
			{"clusterName": "unreachable", "network": "n5", "meta": {"kubeconfig": "unreachable.kubeconfig"}},
			{"clusterName": "bad-token", "network": "n6", "meta": {"kubeconfig": "kubeconfig", "context": "bad-token"}},
			{"clusterName": "powerless", "network": "n7", "meta": {"kubeconfig": "kubeconfig", "context": "powerless"}}
		]`)
		before := plan.Clusters[0]
		found, err := p.CheckExisting(ctx, plan)
		if err == nil || found != nil {
			t.Fatalf("bad clusters passed their checks (found %+v)", found)
		}
		t.Logf("the error a user sees:\n%v", err)
		for _, w := range []string{
			"nothing was changed",
			`cluster "no-file": cannot read kubeconfig ` + filepath.Join(e.dir, "does-not-exist"),
			`cluster "not-kubeconfig": kubeconfig ` + filepath.Join(e.dir, "garbage") + " (meta.kubeconfig) is not a kubeconfig",
			`cluster "no-context": kubeconfig ` + e.kubeconfig + ` has no context "nope" (it has "admin", "bad-token", "elsewhere", "powerless", "restricted")`,
			`cluster "unreachable": API server https://127.0.0.1:` + itoa(closedPort) + " (context (current-context)) is unreachable",
			`cluster "bad-token": API server ` + e.cfg.Host + " rejected the credentials of context bad-token (401 Unauthorized)",
			`cluster "powerless": context powerless is not authorized to list nodes, get services in default, create namespaces`,
		} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q", w)
			}
		}
		if strings.Contains(err.Error(), `"fine"`) {
			t.Errorf("the good cluster is reported: %v", err)
		}
		if lines := strings.Count(err.Error(), "\n  cluster "); lines != 6 {
			t.Errorf("%d cluster messages, want one per bad cluster (6)", lines)
		}
		if !reflect.DeepEqual(plan.Clusters[0], before) {
			t.Errorf("a failed check changed the plan: %+v, was %+v", plan.Clusters[0], before)
		}
	})
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestIntegrationUpMixedKindAndExisting runs Up on a fake kind cluster and a
// real API server standing in for an existing cluster: both end up in the
// environment, the existing one untouched but for meshctl's claim, and down
// deletes the kind cluster and only uninstalls from the existing one.
func TestIntegrationUpMixedKindAndExisting(t *testing.T) {
	e := newExistingCluster(t)
	e.addNode(t, "node-a", "10.244.0.0/24")
	env := newEnv(t)
	ctx := context.Background()
	topology := `[{"clusterName": "local", "network": "network-1"},
		{"clusterName": "ext", "network": "network-2", "meta": {"kubeconfig": "kubeconfig", "context": "admin"}}]`
	plan := e.plan(t, "mix", topology)
	// A user object, which must survive down.
	userCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "user-data", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(ctx, userCM, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	res, err := env.p.Up(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if len(env.kind.created) != 1 || env.kind.created[0] != "mix-local" {
		t.Errorf("kind created %v, want only mix-local", env.kind.created)
	}
	ext := res.Clusters[1]
	if ext.Name != "ext" || ext.Action != ActionExisting || ext.KindName != "" {
		t.Errorf("ext result %+v", ext)
	}
	// The copy other steps use: 0600, one context named after the mesh
	// cluster, the CA file embedded, and it works.
	checkKubeconfig(t, ext.Kubeconfig, "ext", e.cfg.Host)
	checkKubeconfig(t, ext.InternalKubeconfig, "ext", e.cfg.Host)
	copyCfg, err := clientcmd.LoadFromFile(ext.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(copyCfg.Contexts) != 1 || len(copyCfg.Clusters["ext"].CertificateAuthorityData) == 0 || copyCfg.Clusters["ext"].CertificateAuthority != "" {
		t.Errorf("kubeconfig copy is not self-contained: %+v", copyCfg.Clusters["ext"])
	}
	rc, err := clientcmd.BuildConfigFromFlags("", ext.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	viaCopy := kubernetes.NewForConfigOrDie(rc)
	claim, err := viaCopy.CoreV1().ConfigMaps(model.ClaimNamespace).Get(ctx, model.ClaimName, metav1.GetOptions{})
	if err != nil || claim.Data["env"] != "mix" || claim.Data["cluster"] != "ext" || claim.Labels[model.ManagedByLabel] != model.ManagedByValue {
		t.Fatalf("claim %+v: %v", claim, err)
	}

	// What a later step installs, labelled as meshctl's (the cacerts
	// Secret), and a user Secret beside it that is not.
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "cacerts", Namespace: "istio-system", Labels: map[string]string{model.ManagedByLabel: model.ManagedByValue}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "users-own", Namespace: "istio-system"}},
	} {
		_, _ = viaCopy.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}, metav1.CreateOptions{})
		if _, err := viaCopy.CoreV1().Secrets("istio-system").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	st, err := env.p.Status(ctx, "mix", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Clusters) != 2 {
		t.Fatalf("status has %d clusters, want 2", len(st.Clusters))
	}
	var extSt ClusterStatus
	for _, c := range st.Clusters {
		if c.Name == "ext" {
			extSt = c
		}
	}
	if !extSt.Existing || extSt.Error != "" || len(extSt.Nodes) != 1 || extSt.Nodes[0].Name != "node-a" || extSt.Discovery == nil ||
		!slices.Equal(extSt.ServiceSubnets, []string{"10.0.0.0/24"}) {
		t.Errorf("ext status %+v", extSt)
	}
	all, err := env.p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Record == nil || !all[0].Record.Cluster.Existing || all[1].KindName != "mix-local" {
		t.Errorf("list %+v", all)
	}

	// Up again: the same; another environment may not take the cluster.
	again, err := env.p.Up(ctx, e.plan(t, "mix", topology))
	if err != nil || again.Clusters[0].Action != ActionReused || again.Clusters[1].Action != ActionExisting {
		t.Fatalf("rerun: %+v, %v", again, err)
	}
	_, err = env.p.Up(ctx, e.plan(t, "other", `[{"clusterName": "ext", "meta": {"kubeconfig": "kubeconfig", "context": "admin"}}]`))
	if err == nil || !strings.Contains(err.Error(), `cluster "ext": is used by meshctl environment "mix"`) {
		t.Fatalf("another environment took the cluster: %v", err)
	}

	down, err := env.p.Down(ctx, "mix")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(down.Deleted, []string{"mix-local"}) || len(env.kind.deleted) != 1 {
		t.Errorf("down deleted %v (kind %v), want only mix-local", down.Deleted, env.kind.deleted)
	}
	if len(down.Uninstalled) != 1 || down.Uninstalled[0].Cluster != "ext" || !down.Uninstalled[0].Existing {
		t.Fatalf("uninstalled %+v", down.Uninstalled)
	}
	objs := down.Uninstalled[0].Objects
	for _, w := range []string{"secrets/istio-system/cacerts", "configmaps/meshctl-system/meshctl-cluster", "namespaces/meshctl-system"} {
		if !slices.Contains(objs, w) {
			t.Errorf("uninstalled %v lacks %s", objs, w)
		}
	}
	if slices.Index(objs, "namespaces/meshctl-system") != len(objs)-1 {
		t.Errorf("namespaces must go last: %v", objs)
	}
	// The user's objects, and the namespace meshctl did not create, stay.
	if _, err := e.cs.CoreV1().ConfigMaps("default").Get(ctx, "user-data", metav1.GetOptions{}); err != nil {
		t.Errorf("user ConfigMap: %v", err)
	}
	if _, err := e.cs.CoreV1().Secrets("istio-system").Get(ctx, "users-own", metav1.GetOptions{}); err != nil {
		t.Errorf("user Secret: %v", err)
	}
	if _, err := e.cs.CoreV1().Secrets("istio-system").Get(ctx, "cacerts", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cacerts survived down: %v", err)
	}
	if _, err := e.cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Errorf("node: %v", err)
	}
	// meshctl's local files for it are gone, and so is the environment.
	for _, f := range []string{ext.Kubeconfig, ext.InternalKubeconfig, env.p.existingRecordPath("mix", "ext")} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s survived down: %v", f, err)
		}
	}
	if cs, err := env.p.Environment(ctx, "mix"); err != nil || len(cs) != 0 {
		t.Errorf("environment after down: %v, %v", cs, err)
	}
	// Now another environment may use it.
	if _, err := env.p.CheckExisting(ctx, e.plan(t, "other", `[{"clusterName": "ext", "meta": {"kubeconfig": "kubeconfig", "context": "admin"}}]`)); err != nil {
		t.Errorf("after down, another environment: %v", err)
	}
}

// TestIntegrationExistingOnlyNeedsNoDocker: an environment of existing
// clusters alone (CI on real clusters) is brought up, inspected and taken
// down on a machine where Docker does not answer.
func TestIntegrationExistingOnlyNeedsNoDocker(t *testing.T) {
	e := newExistingCluster(t)
	e.addNode(t, "node-a", "10.244.0.0/24")
	env := newEnv(t)
	env.docker.down = true
	env.kind.listErr = errors.New("failed to list clusters: docker: executable file not found in $PATH")
	ctx := context.Background()
	plan := e.plan(t, "ci", `[{"clusterName": "real", "meta": {"kubeconfig": "kubeconfig", "context": "admin"}}]`)
	res, err := env.p.Up(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if res.Registry != nil || len(env.docker.calls) != 0 {
		t.Errorf("an existing-only up used Docker: registry %+v, calls %v", res.Registry, env.docker.calls)
	}
	st, err := env.p.Status(ctx, "ci", "")
	if err != nil || len(st.Clusters) != 1 || !st.Clusters[0].Existing || st.Clusters[0].Error != "" {
		t.Fatalf("status %+v: %v", st, err)
	}
	down, err := env.p.Down(ctx, "ci")
	if err != nil || len(down.Deleted) != 0 || len(down.Uninstalled) != 1 {
		t.Fatalf("down %+v: %v", down, err)
	}
}

// TestIntegrationDownUninstallOnly keeps a kind cluster (whose API server is
// a real one here) and removes only what meshctl labelled in it.
func TestIntegrationDownUninstallOnly(t *testing.T) {
	e := newExistingCluster(t)
	env := newEnv(t)
	ctx := context.Background()
	if _, err := env.p.Up(ctx, mustPlan(t, model.Request{Env: "keep", Clusters: 1})); err != nil {
		t.Fatal(err)
	}
	// kind's kubeconfig for it: its context named as kind names it.
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kind-keep-cluster1"] = &clientcmdapi.Cluster{Server: e.cfg.Host, CertificateAuthorityData: e.cfg.CAData}
	kc.AuthInfos["kind-keep-cluster1"] = &clientcmdapi.AuthInfo{ClientCertificateData: e.cfg.CertData, ClientKeyData: e.cfg.KeyData}
	kc.Contexts["kind-keep-cluster1"] = &clientcmdapi.Context{Cluster: "kind-keep-cluster1", AuthInfo: "kind-keep-cluster1"}
	kc.CurrentContext = "kind-keep-cluster1"
	raw, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	env.kind.kubeconfigs = map[string]string{"keep-cluster1": string(raw)}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "ours", Namespace: "default", Labels: map[string]string{model.ManagedByLabel: model.ManagedByValue}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: "default"}},
	} {
		if _, err := e.cs.CoreV1().Secrets("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	down, err := env.p.Down(ctx, "keep", DownWithUninstallOnly(true))
	if err != nil {
		t.Fatal(err)
	}
	if len(down.Deleted) != 0 || len(env.kind.deleted) != 0 {
		t.Errorf("uninstall-only deleted %v", env.kind.deleted)
	}
	if len(down.Uninstalled) != 1 || down.Uninstalled[0].Cluster != "cluster1" || down.Uninstalled[0].Existing || !slices.Equal(down.Uninstalled[0].Objects, []string{"secrets/default/ours"}) {
		t.Errorf("uninstalled %+v", down.Uninstalled)
	}
	if _, err := e.cs.CoreV1().Secrets("default").Get(ctx, "theirs", metav1.GetOptions{}); err != nil {
		t.Errorf("an unlabelled Secret went: %v", err)
	}
	if cs, err := env.p.Environment(ctx, "keep"); err != nil || len(cs) != 1 {
		t.Errorf("the kind cluster left the environment: %v %v", cs, err)
	}
}
