package policy

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// istioCRD is a minimal stand-in for the base chart's CRD: the same group,
// version and names, with an open schema so that the test can also store
// objects the real schema would refuse.
func istioCRD(kind, plural string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + ".security.istio.io"},
		"spec": map[string]any{
			"group": "security.istio.io", "scope": "Namespaced",
			"names": map[string]any{"kind": kind, "plural": plural, "singular": plural[:len(plural)-1], "listKind": kind + "List"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
}

func obj(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "security.istio.io/v1", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}}
}

// eventually polls cond; the deadline only keeps a broken watcher from
// hanging the test, it is not a latency requirement.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// TestIntegrationWatcher: against a real kube-apiserver without Istio's
// CRDs, the watcher waits; once the CRDs are installed it picks policies
// up, follows updates and deletions, and reads a malformed policy fail-safe.
func TestIntegrationWatcher(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver; skipped with -short")
	}
	cfg := testenv.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dyn := dynamic.NewForConfigOrDie(cfg)
	kc := kubernetes.NewForConfigOrDie(cfg)
	for _, ns := range []string{"foo", "istio-system"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	store := NewStore("")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := NewWatcher(cfg, store, log, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	// Before it has looked for the CRDs once, it is not synced: a proxy
	// ready then would allow what policies deny.
	if w.Synced() {
		t.Fatal("Synced before the CRDs were looked for")
	}
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// A few rechecks without the CRDs: nothing starts, nothing breaks.
	time.Sleep(600 * time.Millisecond)
	if w.allStarted() || len(store.Dump()) != 0 {
		t.Fatal("watcher started without the CRDs")
	}

	for _, c := range []*unstructured.Unstructured{istioCRD("AuthorizationPolicy", "authorizationpolicies"), istioCRD("PeerAuthentication", "peerauthentications")} {
		if _, err := dyn.Resource(crdGVR).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Creating CRs right after the CRDs can race their establishment.
	create := func(gvr schema.GroupVersionResource, o *unstructured.Unstructured) {
		t.Helper()
		eventually(t, "create "+o.GetName(), func() bool {
			_, err := dyn.Resource(gvr).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{})
			return err == nil
		})
	}
	create(AuthorizationPoliciesGVR, obj("AuthorizationPolicy", "foo", "deny-bar", map[string]any{
		"action": "DENY",
		"rules":  []any{map[string]any{"from": []any{map[string]any{"source": map[string]any{"namespaces": []any{"bar"}}}}}},
	}))

	fromBar := Conn{Peer: identity.New("cluster.local", "bar", "x"), Src: netip.MustParseAddr("10.0.1.1"), Dst: netip.MustParseAddrPort("10.0.2.2:80")}
	plain := Conn{Src: netip.MustParseAddr("10.0.1.1"), Dst: netip.MustParseAddrPort("10.0.2.2:80")}
	foo := Workload{Namespace: "foo"}
	eventually(t, "the DENY policy is enforced", func() bool { return store.Check(fromBar, foo).Reason == ReasonDenied })
	if !store.Check(plain, foo).Allowed {
		t.Fatal("plaintext denied without STRICT")
	}

	create(PeerAuthenticationsGVR, obj("PeerAuthentication", "istio-system", "default", map[string]any{"mtls": map[string]any{"mode": "STRICT"}}))
	eventually(t, "mesh-wide STRICT is enforced", func() bool { return store.Check(plain, foo).Reason == ReasonStrict })

	// A malformed ALLOW (the real schema would refuse it): its broken rule
	// matches nothing, so the namespace is closed to all.
	create(AuthorizationPoliciesGVR, obj("AuthorizationPolicy", "foo", "broken-allow", map[string]any{
		"rules": []any{map[string]any{"from": "everyone"}},
	}))
	fromBaz := Conn{Peer: identity.New("cluster.local", "baz", "x"), Src: netip.MustParseAddr("10.0.1.1"), Dst: netip.MustParseAddrPort("10.0.2.2:80")}
	eventually(t, "the malformed ALLOW matches nothing", func() bool { return store.Check(fromBaz, foo).Reason == ReasonNotAllowed })

	// Deletions are followed.
	for _, name := range []string{"deny-bar", "broken-allow"} {
		if err := dyn.Resource(AuthorizationPoliciesGVR).Namespace("foo").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "deleted policies are forgotten", func() bool { return store.Check(fromBar, foo).Allowed })
	if !w.Synced() || !w.allStarted() {
		t.Error("watcher not synced with both informers started")
	}
}

// asProxy is cfg impersonating a user with the rules of the dataplane
// chart's meshctl-proxy ClusterRole for policies; withCRDs adds its watch
// of CRDs.
func asProxy(t *testing.T, ctx context.Context, cfg *rest.Config, user string, withCRDs bool) *rest.Config {
	t.Helper()
	kc := kubernetes.NewForConfigOrDie(cfg)
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"security.istio.io"}, Resources: []string{"authorizationpolicies", "peerauthentications"}, Verbs: []string{"get", "list", "watch"}}}
	if withCRDs {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"list", "watch"}})
	}
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user}
	return c
}

// TestIntegrationWatcherHearsCRDs: Istio's CRDs installed after the proxy
// started are picked up when they are served, not at the next recheck: a
// DENY created right after them is enforced with the recheck an hour away
// (it was enforced up to 30 s late, the recheck period, allowing what it
// denied meanwhile). Where the proxy may not watch CRDs, the recheck
// still finds them, and that is said once.
func TestIntegrationWatcherHearsCRDs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver; skipped with -short")
	}
	cfg := testenv.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dyn := dynamic.NewForConfigOrDie(cfg)
	kc := kubernetes.NewForConfigOrDie(cfg)
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "foo"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	type watcher struct {
		store *Store
		logs  *syncBuffer
	}
	run := func(user string, withCRDs bool, recheck time.Duration) watcher {
		t.Helper()
		store := NewStore("")
		logs := &syncBuffer{}
		w, err := NewWatcher(asProxy(t, ctx, cfg, user, withCRDs), store, slog.New(slog.NewTextHandler(logs, nil)), recheck)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		eventually(t, user+" looked for the CRDs", w.Synced)
		return watcher{store, logs}
	}
	watching := run("proxy", true, time.Hour)
	rechecking := run("proxy-without-crds", false, 300*time.Millisecond)
	// Let both fail to find the CRDs a few times first.
	time.Sleep(time.Second)

	for _, c := range []*unstructured.Unstructured{istioCRD("AuthorizationPolicy", "authorizationpolicies"), istioCRD("PeerAuthentication", "peerauthentications")} {
		if _, err := dyn.Resource(crdGVR).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deny := obj("AuthorizationPolicy", "foo", "deny-bar", map[string]any{
		"action": "DENY",
		"rules":  []any{map[string]any{"from": []any{map[string]any{"source": map[string]any{"namespaces": []any{"bar"}}}}}},
	})
	eventually(t, "create deny-bar", func() bool {
		_, err := dyn.Resource(AuthorizationPoliciesGVR).Namespace("foo").Create(ctx, deny, metav1.CreateOptions{})
		return err == nil
	})
	fromBar := Conn{Peer: identity.New("cluster.local", "bar", "x"), Src: netip.MustParseAddr("10.0.1.1"), Dst: netip.MustParseAddrPort("10.0.2.2:80")}
	foo := Workload{Namespace: "foo"}
	for name, w := range map[string]watcher{"watching CRDs": watching, "rechecking": rechecking} {
		eventually(t, "the DENY policy is enforced by the watcher "+name, func() bool { return w.store.Check(fromBar, foo).Reason == ReasonDenied })
	}
	if n := strings.Count(rechecking.logs.String(), "cannot watch CRDs"); n != 1 {
		t.Errorf("the watcher without the CRD watch said so %d times, want once:\n%s", n, rechecking.logs)
	}
	if strings.Contains(watching.logs.String(), "cannot watch CRDs") {
		t.Errorf("the watcher allowed to watch CRDs said it cannot:\n%s", watching.logs)
	}
}

// syncBuffer is a bytes.Buffer safe for the watcher's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
