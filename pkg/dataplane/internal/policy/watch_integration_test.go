package policy

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

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
