package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	admissionregistrationv1 "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// machine holds meshctl's records of every kind cluster on a machine, as
// cluster.Provider keeps them on the nodes: several envSources share one to
// play several environments on one docker network.
type machine struct {
	mu      sync.Mutex
	records map[string]model.Record // by kind name
	// pause, when set, runs before each read ("list") and write
	// ("set"): it lets concurrent claims interleave.
	pause func(op string)
}

func newMachine() *machine { return &machine{records: map[string]model.Record{}} }

// add records clusters as meshctl creates them: with empty pools.
func (m *machine) add(env string, plans ...model.ClusterPlan) {
	m.addRecords(env, &model.Pools{}, plans...)
}

// addLegacy records clusters as a meshctl that did not record pools did.
func (m *machine) addLegacy(env string, plans ...model.ClusterPlan) {
	m.addRecords(env, nil, plans...)
}

func (m *machine) addRecords(env string, pools *model.Pools, plans ...model.ClusterPlan) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range plans {
		name := p.KindName
		if p.Existing {
			name = "existing/" + env + "/" + p.Name // an existing cluster's record is local
		}
		m.records[name] = model.Record{Env: env, Cluster: model.ClusterState{ClusterPlan: p}, Pools: pools}
	}
}

func (m *machine) List(context.Context) ([]cluster.Listed, error) {
	if m.pause != nil {
		m.pause("list")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []cluster.Listed
	for name, r := range m.records {
		if r.Pools != nil {
			p := *r.Pools
			r.Pools = &p
		}
		if r.Cluster.Existing {
			name = ""
		}
		out = append(out, cluster.Listed{KindName: name, Record: &r})
	}
	return out, nil
}

func (m *machine) SetPools(_ context.Context, kindName string, pools *model.Pools) error {
	if m.pause != nil {
		m.pause("set")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[kindName]
	if !ok {
		return fmt.Errorf("no kind cluster %s", kindName)
	}
	r.Pools = pools
	m.records[kindName] = r
	return nil
}

// pools returns the pools recorded for a kind cluster.
func (m *machine) pools(kindName string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.records[kindName].Pools; p != nil {
		return p.CIDRs
	}
	return nil
}

// envSource is an environment whose clusters are testenv API servers, on a
// machine shared with other environments.
type envSource struct {
	*machine
	plans   []model.ClusterPlan
	configs map[string]*rest.Config
}

// newEnvSource records plans as environment env on m (a new machine if nil).
func newEnvSource(m *machine, env string, configs map[string]*rest.Config, plans ...model.ClusterPlan) *envSource {
	if m == nil {
		m = newMachine()
	}
	m.add(env, plans...)
	return &envSource{machine: m, plans: plans, configs: configs}
}

func (s *envSource) Environment(context.Context, string) ([]model.ClusterState, error) {
	out := make([]model.ClusterState, len(s.plans))
	for i, p := range s.plans {
		out[i].ClusterPlan = p
	}
	return out, nil
}

func (s *envSource) ClusterKubeconfig(_ context.Context, c model.ClusterPlan, _ bool) ([]byte, error) {
	cfg, ok := s.configs[c.Name]
	if !ok {
		return nil, fmt.Errorf("no cluster %q", c.Name)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	return clientcmd.Write(*kc)
}

// recordingLoader records which images each cluster was asked to load.
type recordingLoader struct {
	mu    sync.Mutex
	calls map[string][]string
}

func (l *recordingLoader) LoadImages(_ context.Context, kindName string, images ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[kindName] = append(l.calls[kindName], images...)
	return nil
}

// standIn plays, in an API server where no controller runs, the parts of
// the cluster Install waits for: the Deployment and DaemonSet controllers
// (status) and MetalLB's controller (the Service gets the first address of
// the pool).
func standIn(ctx context.Context, t *testing.T, cfg *rest.Config) {
	k, err := newKube(cfg)
	if err != nil {
		t.Fatal(err)
	}
	poolGVR := schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
	step := func() {
		if d, err := k.cs.AppsV1().Deployments(MetalLBNamespace).Get(ctx, "controller", metav1.GetOptions{}); err == nil && d.Status.AvailableReplicas == 0 {
			d.Status.ObservedGeneration, d.Status.Replicas, d.Status.AvailableReplicas, d.Status.ReadyReplicas = d.Generation, 1, 1, 1
			d.Status.UpdatedReplicas = 1
			_, _ = k.cs.AppsV1().Deployments(MetalLBNamespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
		}
		if ds, err := k.cs.AppsV1().DaemonSets(MetalLBNamespace).Get(ctx, "speaker", metav1.GetOptions{}); err == nil && ds.Status.NumberAvailable == 0 {
			ds.Status.ObservedGeneration, ds.Status.DesiredNumberScheduled, ds.Status.NumberAvailable = ds.Generation, 1, 1
			ds.Status.UpdatedNumberScheduled, ds.Status.NumberReady, ds.Status.CurrentNumberScheduled = 1, 1, 1
			_, _ = k.cs.AppsV1().DaemonSets(MetalLBNamespace).UpdateStatus(ctx, ds, metav1.UpdateOptions{})
		}
		pool, err := k.dyn.Resource(poolGVR).Namespace(MetalLBNamespace).Get(ctx, PoolName, metav1.GetOptions{})
		if err != nil {
			return
		}
		addrs, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "addresses")
		if len(addrs) == 0 {
			return
		}
		// MetalLB gives each LoadBalancer Service the next free address.
		svcs, err := k.cs.CoreV1().Services(GatewayNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		next := netip.MustParsePrefix(addrs[0]).Addr()
		for _, svc := range svcs.Items {
			if len(svc.Status.LoadBalancer.Ingress) > 0 {
				next = next.Next()
			}
		}
		for _, svc := range svcs.Items {
			if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) > 0 {
				continue
			}
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: next.String()}}
			_, _ = k.cs.CoreV1().Services(GatewayNamespace).UpdateStatus(ctx, &svc, metav1.UpdateOptions{})
			return
		}
	}
	go func() {
		for ctx.Err() == nil {
			step()
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

// resourceVersions reads the resourceVersion of every object Install
// applies.
func resourceVersions(t *testing.T, cfg *rest.Config, network string) map[string]string {
	t.Helper()
	k, err := newKube(cfg)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := metallbObjects(DefaultControllerImage, DefaultSpeakerImage)
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, poolObjects(nil)...)
	objs = append(objs, gatewayObjects(network)...)
	out := map[string]string{}
	for _, o := range objs {
		gvr, _ := meta.UnsafeGuessKindToResource(o.GroupVersionKind())
		got, err := k.dyn.Resource(gvr).Namespace(o.GetNamespace()).Get(context.Background(), o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), qualified(o), err)
		}
		out[o.GetKind()+" "+qualified(o)] = got.GetResourceVersion()
	}
	return out
}

// apiServers starts a real kube-apiserver + etcd per name, concurrently
// (each takes seconds to start). Skipping and failing happen here, on the
// test's goroutine: t.Skip and t.Fatal from another goroutine only end that
// goroutine, and the test then fails instead of skipping.
func apiServers(t *testing.T, names ...string) map[string]*rest.Config {
	t.Helper()
	if _, _, err := testenv.Binaries(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfgs := map[string]*rest.Config{}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			env, err := testenv.Start(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				return
			}
			t.Cleanup(func() { _ = env.Stop() })
			cfgs[name] = env.Config
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return cfgs
}

func TestIntegrationInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two kube-apiservers")
	}
	cfgs := apiServers(t, "cluster1", "cluster2")
	src := newEnvSource(nil, "gw", cfgs,
		model.ClusterPlan{Name: "cluster1", KindName: "gw-cluster1", Network: "network-1", IPFamily: model.Dual},
		model.ClusterPlan{Name: "cluster2", KindName: "gw-cluster2", Network: "network-2", IPFamily: model.Dual})
	subnets := []netip.Prefix{netip.MustParsePrefix("172.18.0.0/16"), netip.MustParsePrefix("fc00:f853:ccd:e793::/64")}
	loader := &recordingLoader{calls: map[string][]string{}}
	newInstaller := func(opts ...Option) *Installer {
		i := New(src, append([]Option{WithSubnets(subnets...), WithImageLoader(loader), WithTimeout(time.Minute)}, opts...)...)
		i.poll = 100 * time.Millisecond
		return i
	}
	ctx := context.Background()
	noMetalLB := func(when string) {
		t.Helper()
		for name, cfg := range cfgs {
			k, _ := newKube(cfg)
			if _, err := k.cs.CoreV1().Namespaces().Get(ctx, MetalLBNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("%s: %s: namespace %s exists (err %v), want nothing applied", when, name, MetalLBNamespace, err)
			}
		}
	}

	// Bad input is found before any cluster is touched.
	_, err := newInstaller(WithSubnets(netip.MustParsePrefix("192.168.9.0/28"))).Install(ctx, "gw")
	if err == nil || !strings.Contains(err.Error(), "192.168.9.0/28 is too small for load-balancer pools of 16 addresses") {
		t.Fatalf("err = %v, want the too-small network named", err)
	}
	bad := &envSource{machine: src.machine, plans: src.plans, configs: map[string]*rest.Config{"cluster1": cfgs["cluster1"]}}
	if _, err := New(bad, WithSubnets(subnets...), WithImageLoader(loader)).Install(ctx, "gw"); err == nil || !strings.Contains(err.Error(), "cluster cluster2") {
		t.Fatalf("err = %v, want the cluster without kubeconfig named", err)
	}
	noMetalLB("after bad input")
	for _, p := range src.plans {
		if got := src.pools(p.KindName); got != nil {
			t.Fatalf("after bad input: %s has pools %v recorded, want none", p.Name, got)
		}
	}

	// One network: nothing to do.
	one := newEnvSource(nil, "gw", cfgs,
		model.ClusterPlan{Name: "cluster1", KindName: "gw-cluster1", Network: "network-1"}, model.ClusterPlan{Name: "cluster2", KindName: "gw-cluster2", Network: "network-1"})
	res, err := New(one, WithSubnets(subnets...), WithImageLoader(loader)).Install(ctx, "gw")
	if err != nil || res.MultiNetwork || len(res.Clusters) != 0 {
		t.Fatalf("one network: %+v, %v; want nothing done", res, err)
	}
	noMetalLB("with one network")

	// What an earlier meshctl left in cluster1: MetalLB's webhook
	// configuration, which nothing serves now (the pool's apply would fail
	// through it); in cluster2 one of the same name of another owner's.
	webhooks := func(name string) admissionregistrationv1.ValidatingWebhookConfigurationInterface {
		return kubernetes.NewForConfigOrDie(cfgs[name]).AdmissionregistrationV1().ValidatingWebhookConfigurations()
	}
	fail, none, path := admv1.Fail, admv1.SideEffectClassNone, "/validate-metallb-io-v1beta1-ipaddresspool"
	stale := &admv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: webhookConfigurationName, Labels: map[string]string{ManagedByLabel: FieldManager}},
		Webhooks: []admv1.ValidatingWebhook{{
			Name:                    "ipaddresspoolvalidationwebhook.metallb.io",
			ClientConfig:            admv1.WebhookClientConfig{Service: &admv1.ServiceReference{Namespace: MetalLBNamespace, Name: "metallb-webhook-service", Path: &path}},
			Rules:                   []admv1.RuleWithOperations{{Operations: []admv1.OperationType{admv1.Create, admv1.Update}, Rule: admv1.Rule{APIGroups: []string{"metallb.io"}, APIVersions: []string{"v1beta1"}, Resources: []string{"ipaddresspools"}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := webhooks("cluster1").Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	foreign := &admv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: webhookConfigurationName}}
	if _, err := webhooks("cluster2").Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, cfg := range cfgs {
		standIn(runCtx, t, cfg)
	}
	t0 := time.Now()
	res, err = newInstaller().Install(ctx, "gw")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first install: %s", time.Since(t0).Round(time.Millisecond))
	if !res.MultiNetwork || len(res.Clusters) != 2 {
		t.Fatalf("result %+v", res)
	}
	wantPools := [][]string{
		{"172.18.255.224/28", "fc00:f853:ccd:e793:ffff:ffff:ffff:ffe0/124"},
		{"172.18.255.208/28", "fc00:f853:ccd:e793:ffff:ffff:ffff:ffd0/124"},
	}
	for i, c := range res.Clusters {
		if !slices.Equal(c.Pools, wantPools[i]) {
			t.Errorf("%s pools %v, want %v", c.Cluster, c.Pools, wantPools[i])
		}
		if len(c.Addresses) != 1 || !inPools(c.Address(), []netip.Prefix{netip.MustParsePrefix(c.Pools[0])}) {
			t.Errorf("%s addresses %v, want one from %s", c.Cluster, c.Addresses, c.Pools[0])
		}
		if c.Service != "istio-system/istio-eastwestgateway" || c.Network != src.plans[i].Network {
			t.Errorf("result %+v", c)
		}
		if !slices.Equal(loader.calls[src.plans[i].KindName], []string{DefaultControllerImage, DefaultSpeakerImage}) {
			t.Errorf("%s: images loaded %v", c.Cluster, loader.calls[src.plans[i].KindName])
		}
		// what the cluster holds
		k, _ := newKube(cfgs[c.Cluster])
		crds, err := k.dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).List(ctx, metav1.ListOptions{})
		if err != nil || len(crds.Items) != 8 {
			t.Errorf("%s: %d CRDs (%v), want MetalLB's 8", c.Cluster, len(crds.Items), err)
		}
		pool, err := k.dyn.Resource(schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}).Namespace(MetalLBNamespace).Get(ctx, PoolName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if addrs, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "addresses"); !slices.Equal(addrs, wantPools[i]) {
			t.Errorf("%s: IPAddressPool addresses %v", c.Cluster, addrs)
		}
		if rec := src.pools(src.plans[i].KindName); !slices.Equal(rec, wantPools[i]) {
			t.Errorf("%s: recorded pools %v, want %v", c.Cluster, rec, wantPools[i])
		}
		if _, err := k.dyn.Resource(schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"}).Namespace(MetalLBNamespace).Get(ctx, PoolName, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: L2Advertisement: %v", c.Cluster, err)
		}
		svc, err := k.cs.CoreV1().Services(GatewayNamespace).Get(ctx, GatewayName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Spec.Ports) != 5 || svc.Spec.Selector[NetworkLabel] != c.Network {
			t.Errorf("%s: service %+v", c.Cluster, svc.Spec)
		}
		ns, _ := k.cs.CoreV1().Namespaces().Get(ctx, GatewayNamespace, metav1.GetOptions{})
		if ns.Labels[NetworkLabel] != c.Network {
			t.Errorf("%s: istio-system labels %v", c.Cluster, ns.Labels)
		}
		d, _ := k.cs.AppsV1().Deployments(MetalLBNamespace).Get(ctx, "controller", metav1.GetOptions{})
		if img := d.Spec.Template.Spec.Containers[0].Image; img != DefaultControllerImage {
			t.Errorf("%s: controller image %s", c.Cluster, img)
		}
	}
	if _, err := webhooks("cluster1").Get(ctx, webhookConfigurationName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster1: meshctl's stale %s: err %v, want it deleted", webhookConfigurationName, err)
	}
	if _, err := webhooks("cluster2").Get(ctx, webhookConfigurationName, metav1.GetOptions{}); err != nil {
		t.Errorf("cluster2: another owner's %s: %v, want it left", webhookConfigurationName, err)
	}

	// A rerun changes nothing and reports the same.
	before := map[string]map[string]string{}
	for i, p := range src.plans {
		before[p.Name] = resourceVersions(t, cfgs[p.Name], src.plans[i].Network)
	}
	t0 = time.Now()
	again, err := newInstaller().Install(ctx, "gw")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rerun: %s", time.Since(t0).Round(time.Millisecond))
	for i, c := range again.Clusters {
		if !slices.Equal(c.Addresses, res.Clusters[i].Addresses) || !slices.Equal(c.Pools, res.Clusters[i].Pools) {
			t.Errorf("rerun reports %+v, first run %+v", c, res.Clusters[i])
		}
	}
	for i, p := range src.plans {
		after := resourceVersions(t, cfgs[p.Name], src.plans[i].Network)
		for obj, rv := range before[p.Name] {
			if after[obj] != rv {
				t.Errorf("%s: rerun changed %s (resourceVersion %s → %s)", p.Name, obj, rv, after[obj])
			}
		}
	}
}

// TestIntegrationPrimaryOfRemotesOnOneNetwork: with one network there are
// no east-west gateways, but a primary of remotes gets MetalLB, its pool
// and the istiod Service remotes reach it through (their
// global.remotePilotAddress); its remote gets nothing. A rerun reports the
// same address.
func TestIntegrationPrimaryOfRemotesOnOneNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two kube-apiservers")
	}
	cfgs := apiServers(t, "cluster1", "cluster2")
	src := newEnvSource(nil, "gw", cfgs,
		model.ClusterPlan{Name: "cluster1", KindName: "gw-cluster1", Network: "network-1"},
		model.ClusterPlan{Name: "cluster2", KindName: "gw-cluster2", Network: "network-1", PrimaryClusterName: "cluster1"})
	loader := &recordingLoader{calls: map[string][]string{}}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	for _, cfg := range cfgs {
		standIn(ctx, t, cfg)
	}
	install := func() *Result {
		t.Helper()
		i := New(src, WithSubnets(netip.MustParsePrefix("172.18.0.0/16")), WithImageLoader(loader), WithTimeout(time.Minute))
		i.poll = 100 * time.Millisecond
		res, err := i.Install(ctx, "gw")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := install()
	if res.MultiNetwork || len(res.Clusters) != 1 {
		t.Fatalf("result %+v, want cluster1 alone", res)
	}
	c1 := res.Clusters[0]
	if c1.Cluster != "cluster1" || len(c1.Addresses) != 0 || c1.Service != "" || len(c1.Pools) != 1 ||
		!inPools(c1.IstiodAddress(), []netip.Prefix{netip.MustParsePrefix(c1.Pools[0])}) {
		t.Fatalf("cluster1: %+v, want an istiod address from its pool and no gateway", c1)
	}
	k, _ := newKube(cfgs["cluster1"])
	svc, err := k.cs.CoreV1().Services(GatewayNamespace).Get(ctx, IstiodServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ports []int32
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Port)
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || !slices.Equal(ports, []int32{PortIstiod, PortWebhook}) ||
		svc.Spec.Selector["app"] != "istiod" || svc.Spec.Selector["istio"] != "pilot" {
		t.Errorf("istiod service %+v", svc.Spec)
	}
	if _, err := k.cs.CoreV1().Services(GatewayNamespace).Get(ctx, GatewayName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("east-west gateway on one network: err %v, want none", err)
	}
	k2, _ := newKube(cfgs["cluster2"])
	if _, err := k2.cs.CoreV1().Namespaces().Get(ctx, MetalLBNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the remote got MetalLB (err %v), want nothing", err)
	}
	if again := install(); again.Clusters[0].IstiodAddress() != c1.IstiodAddress() {
		t.Errorf("rerun: istiod at %s, first run %s", again.Clusters[0].IstiodAddress(), c1.IstiodAddress())
	}
}

// TestAPIServersSkipsWithoutBinaries: on a machine without `make e2e-env`
// the integration tests must skip, saying why, not fail.
func TestAPIServersSkipsWithoutBinaries(t *testing.T) {
	for _, v := range []string{"TESTENV_ETCD", "TESTENV_KUBE_APISERVER"} {
		t.Setenv(v, "")
	}
	t.Setenv("MESHCTL_CACHE", t.TempDir())
	var inner *testing.T
	t.Run("apiServers", func(t *testing.T) {
		inner = t
		apiServers(t, "cluster1", "cluster2")
	})
	if inner.Failed() || !inner.Skipped() {
		t.Fatalf("apiServers without binaries: failed=%v skipped=%v, want a skip and no failure", inner.Failed(), inner.Skipped())
	}
}
