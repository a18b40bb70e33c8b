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
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// The resources watched, in security.istio.io/v1 (Istio's base chart).
var (
	AuthorizationPoliciesGVR = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
	PeerAuthenticationsGVR   = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}
)

// crdsGVR: the watcher watches CustomResourceDefinitions (their metadata
// only) to hear of Istio's security CRDs the moment they are installed.
var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// DefaultRecheck is how often the watcher looks for CRDs not yet installed
// when nothing tells it they changed: the CRD watch wakes it at once, the
// recheck is what remains where that watch is not allowed.
const DefaultRecheck = 30 * time.Second

// settleChecks is how long after a CRD event the watcher looks again,
// one after another: a CRD is served (in discovery) a moment after it is
// created or established, and the event may come before that.
var settleChecks = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
	800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond}

// Watcher feeds a Store from the cluster's AuthorizationPolicies and
// PeerAuthentications in all namespaces. Each informer starts once
// discovery shows its resource: a cluster without Istio's CRDs has no
// policies, and installing Istio's base chart later is picked up as soon
// as the CRDs are served — a policy created right after them is enforced
// within moments, not after a recheck period during which it would be
// ignored.
type Watcher struct {
	dyn     dynamic.Interface
	meta    metadata.Interface
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
	rc, err := kube.RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("policy watcher: %w", err)
	}
	meta, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("policy watcher: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if recheck <= 0 {
		recheck = DefaultRecheck
	}
	return &Watcher{dyn: dyn, meta: meta, disc: disc, store: store, log: log, recheck: recheck,
		started: map[schema.GroupVersionResource]cache.SharedIndexInformer{}}, nil
}

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.recheck)
	defer t.Stop()
	crdCtx, stopCRDs := context.WithCancel(ctx)
	defer stopCRDs()
	changed := w.watchCRDs(crdCtx)
	var settle []time.Duration // the looks still due after a CRD event
	for {
		if err := w.startPresent(ctx); err != nil {
			w.log.Warn("policy CRD discovery failed; retrying", "err", err, "retry", w.recheck)
		} else {
			w.discovered.Store(true)
		}
		if w.allStarted() {
			stopCRDs()
			<-ctx.Done()
			return nil
		}
		var soon <-chan time.Time
		if len(settle) > 0 {
			soon = time.After(settle[0])
			settle = settle[1:]
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-changed:
			settle = slices.Clone(settleChecks)
		case <-soon:
		}
	}
}

// watchCRDs watches the cluster's CRDs (metadata only: their schemas are
// large) and signals on the returned channel when one of Istio's security
// CRDs is added or changes (its establishment is a change). A cluster
// that does not let the watcher list CRDs leaves the periodic recheck;
// that is said once.
func (w *Watcher) watchCRDs(ctx context.Context) <-chan struct{} {
	changed := make(chan struct{}, 1)
	wanted := func(obj any) {
		if m, ok := obj.(metav1.Object); ok {
			switch m.GetName() {
			case AuthorizationPoliciesGVR.Resource + "." + AuthorizationPoliciesGVR.Group,
				PeerAuthenticationsGVR.Resource + "." + PeerAuthenticationsGVR.Group:
				select {
				case changed <- struct{}{}:
				default: // a look is already due
				}
			}
		}
	}
	inf := metadatainformer.NewFilteredMetadataInformer(w.meta, crdsGVR, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    wanted,
		UpdateFunc: func(_, obj any) { wanted(obj) },
	})
	var said atomic.Bool
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		// Replaces the reflector's own logging, which would repeat a
		// Forbidden at every retry.
		if !said.Swap(true) {
			w.log.Info("cannot watch CRDs; looking for Istio's policy CRDs periodically", "err", err, "every", w.recheck)
		}
	})
	go inf.RunWithContext(ctx)
	return changed
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
