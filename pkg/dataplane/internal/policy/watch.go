package policy

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// The resources watched, in security.istio.io/v1 (Istio's base chart).
var (
	AuthorizationPoliciesGVR = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
	PeerAuthenticationsGVR   = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}
)

// DefaultRecheck is how often the watcher looks for CRDs not yet installed.
const DefaultRecheck = 30 * time.Second

// Watcher feeds a Store from the cluster's AuthorizationPolicies and
// PeerAuthentications in all namespaces. Each informer starts once
// discovery shows its resource: a cluster without Istio's CRDs has no
// policies, and installing Istio's base chart later is picked up on the
// next recheck.
type Watcher struct {
	dyn     dynamic.Interface
	disc    discovery.DiscoveryInterface
	store   *Store
	log     *slog.Logger
	recheck time.Duration
	// discovered: the CRDs have been looked for successfully once.
	discovered atomic.Bool

	mu      sync.Mutex
	started map[schema.GroupVersionResource]cache.SharedIndexInformer
}

// NewWatcher returns a Watcher of the cluster cfg points at; recheck <= 0
// is DefaultRecheck.
func NewWatcher(cfg *rest.Config, store *Store, log *slog.Logger, recheck time.Duration) (*Watcher, error) {
	kube := kubeclient.FromConfig(cfg)
	dyn, err := kube.Dynamic()
	if err != nil {
		return nil, fmt.Errorf("policy watcher: %w", err)
	}
	disc, err := kube.Discovery()
	if err != nil {
		return nil, fmt.Errorf("policy watcher: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if recheck <= 0 {
		recheck = DefaultRecheck
	}
	return &Watcher{dyn: dyn, disc: disc, store: store, log: log, recheck: recheck,
		started: map[schema.GroupVersionResource]cache.SharedIndexInformer{}}, nil
}

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.recheck)
	defer t.Stop()
	for {
		if err := w.startPresent(ctx); err != nil {
			w.log.Warn("policy CRD discovery failed; retrying", "err", err, "retry", w.recheck)
		} else {
			w.discovered.Store(true)
		}
		if w.allStarted() {
			<-ctx.Done()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Synced reports whether the CRDs present have been found once and every
// informer started so far has listed once.
func (w *Watcher) Synced() bool {
	if !w.discovered.Load() {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, inf := range w.started {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (w *Watcher) allStarted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.started) == 2
}

func (w *Watcher) startPresent(ctx context.Context) error {
	list, err := w.disc.ServerResourcesForGroupVersion(AuthorizationPoliciesGVR.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return nil // the group is not installed (yet)
	}
	if err != nil {
		return fmt.Errorf("discover %s: %w", AuthorizationPoliciesGVR.GroupVersion(), err)
	}
	var present []string
	for _, r := range list.APIResources {
		present = append(present, r.Name)
	}
	for _, gvr := range []schema.GroupVersionResource{AuthorizationPoliciesGVR, PeerAuthenticationsGVR} {
		w.mu.Lock()
		_, ok := w.started[gvr]
		w.mu.Unlock()
		if ok || !slices.Contains(present, gvr.Resource) {
			continue
		}
		w.start(ctx, gvr)
	}
	return nil
}

func (w *Watcher) start(ctx context.Context, gvr schema.GroupVersionResource) {
	inf := dynamicinformer.NewFilteredDynamicInformer(w.dyn, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	set := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			w.apply(gvr, u)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				w.remove(gvr, u.GetNamespace()+"/"+u.GetName())
			}
		},
	})
	w.mu.Lock()
	w.started[gvr] = inf
	w.mu.Unlock()
	w.log.Info("watching Istio policies", "resource", gvr.String())
	go inf.Run(ctx.Done())
}

func (w *Watcher) apply(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	key := u.GetNamespace() + "/" + u.GetName()
	var warn []string
	var err error
	if gvr == AuthorizationPoliciesGVR {
		var a *Authorization
		a, warn, err = AuthorizationFromUnstructured(u, w.store.RootNamespace())
		if err == nil {
			w.store.SetAuthorization(key, a) // nil: not enforced, removes an older version
		}
	} else {
		var p *PeerAuthentication
		p, warn, err = PeerAuthenticationFromUnstructured(u)
		if err == nil {
			w.store.SetPeerAuthentication(key, p)
		}
	}
	for _, m := range warn {
		w.log.Warn(m)
	}
	if err != nil {
		w.log.Warn("policy ignored", "err", err)
		return
	}
	w.log.Debug("policy updated", "resource", gvr.Resource, "policy", key)
}

func (w *Watcher) remove(gvr schema.GroupVersionResource, key string) {
	if gvr == AuthorizationPoliciesGVR {
		w.store.SetAuthorization(key, nil)
	} else {
		w.store.SetPeerAuthentication(key, nil)
	}
	w.log.Debug("policy removed", "resource", gvr.Resource, "policy", key)
}
