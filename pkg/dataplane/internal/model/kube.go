package model

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	listersdiscoveryv1 "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/enroll"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// Names Istio gives these labels; meshctl's remote secrets carry them
// (package remotesecret writes them).
const (
	// MultiClusterLabel marks a Secret whose keys are cluster names and
	// values kubeconfigs of those clusters.
	MultiClusterLabel = "istio/multiCluster"
	// NetworkLabel on a pod, or on a cluster's system namespace, names
	// its network.
	NetworkLabel = "topology.istio.io/network"
)

// KubeConfig configures the standalone source.
type KubeConfig struct {
	// Cluster is the local cluster's name (Istio's clusterName).
	Cluster string
	// Network is the network of a cluster whose system namespace has no
	// network label.
	Network string
	// TrustDomain of every workload's identity (default cluster.local).
	TrustDomain string
	// Domain is the clusters' DNS domain, for service hostnames
	// (default cluster.local).
	Domain string
	// SystemNamespace is where remote secrets are, and whose namespace's
	// network label names a cluster's network (default istio-system).
	SystemNamespace string
	// ExcludeNamespaces are never in the mesh (the node agent's list).
	ExcludeNamespaces []string
	Log               *slog.Logger
	// NewClient builds a client for a remote cluster from a remote
	// secret's kubeconfig; tests replace it.
	NewClient func(kubeconfig []byte) (kubernetes.Interface, error)
}

// Kube is the standalone source: client-go informers on the local
// cluster's Pods, Services, EndpointSlices and Namespaces and, through the
// remote secrets in the system namespace, on every other cluster of the
// mesh, added and removed as the secrets change.
type Kube struct {
	cfg    KubeConfig
	client kubernetes.Interface
}

// NewKube returns the standalone source reading the local cluster through client.
func NewKube(client kubernetes.Interface, cfg KubeConfig) *Kube {
	if cfg.TrustDomain == "" {
		cfg.TrustDomain = ambient.DefaultTrustDomain
	}
	if cfg.Domain == "" {
		cfg.Domain = ambient.DefaultDomain
	}
	if cfg.SystemNamespace == "" {
		cfg.SystemNamespace = ambient.DefaultSystemNamespace
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.NewClient == nil {
		cfg.NewClient = clientFromKubeconfig
	}
	return &Kube{cfg: cfg, client: client}
}

func clientFromKubeconfig(kubeconfig []byte) (kubernetes.Interface, error) {
	cs, err := kubeclient.FromBytes(kubeconfig, "").Kubernetes()
	if err != nil {
		return nil, fmt.Errorf("remote secret kubeconfig: %w", err)
	}
	return cs, nil
}

// Run feeds sink until ctx ends. It marks the sink synced once the local
// cluster's informers have synced: a remote cluster that cannot be reached
// must not keep the node's proxy from serving its own.
func (k *Kube) Run(ctx context.Context, sink Sink) error {
	local := k.watch(ctx, k.cfg.Cluster, k.client, sink)
	defer local.stop()
	if !local.waitSynced(ctx) {
		return ctx.Err()
	}
	sink.MarkSynced()
	k.cfg.Log.Info("service model synced", "cluster", k.cfg.Cluster)
	return k.runRemotes(ctx, sink)
}

// runRemotes watches the remote secrets and keeps one watch per cluster
// they name.
func (k *Kube) runRemotes(ctx context.Context, sink Sink) error {
	factory := informers.NewSharedInformerFactoryWithOptions(k.client, 0,
		informers.WithNamespace(k.cfg.SystemNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = MultiClusterLabel + "=true" }))
	secrets := factory.Core().V1().Secrets()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := secrets.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke,
	}); err != nil {
		return fmt.Errorf("watching remote secrets: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	type remote struct {
		kubeconfig []byte
		w          *clusterWatch
	}
	remotes := map[string]*remote{}
	defer func() {
		for name, r := range remotes {
			r.w.stop()
			sink.DeleteCluster(name)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		if !cache.WaitForCacheSync(ctx.Done(), secrets.Informer().HasSynced) {
			return nil
		}
		list, err := secrets.Lister().Secrets(k.cfg.SystemNamespace).List(labels.Everything())
		if err != nil {
			return fmt.Errorf("listing remote secrets: %w", err)
		}
		want := map[string][]byte{}
		for _, s := range list {
			for cluster, kc := range s.Data {
				if cluster != k.cfg.Cluster {
					want[cluster] = kc
				}
			}
		}
		for name, r := range remotes {
			if kc, ok := want[name]; ok && bytes.Equal(kc, r.kubeconfig) {
				continue
			}
			k.cfg.Log.Info("remote cluster removed or changed", "cluster", name)
			r.w.stop()
			sink.DeleteCluster(name)
			delete(remotes, name)
		}
		for name, kc := range want {
			if _, ok := remotes[name]; ok {
				continue
			}
			client, err := k.cfg.NewClient(kc)
			if err != nil {
				// Retried when the secret changes: a broken kubeconfig
				// will not fix itself.
				k.cfg.Log.Warn("remote secret unusable", "cluster", name, "err", err)
				continue
			}
			k.cfg.Log.Info("remote cluster added", "cluster", name)
			remotes[name] = &remote{kubeconfig: kc, w: k.watch(ctx, name, client, sink)}
		}
	}
}

// clusterWatch is the informers of one cluster.
type clusterWatch struct {
	k       *Kube
	name    string
	sink    Sink
	factory informers.SharedInformerFactory
	cancel  context.CancelFunc
	synced  []cache.InformerSynced

	pods       listerscorev1.PodLister
	services   listerscorev1.ServiceLister
	namespaces listerscorev1.NamespaceLister
	slices     listersdiscoveryv1.EndpointSliceLister

	// mu serialises reading the listers and feeding the sink: the
	// informers' handlers run concurrently, and a service recomputed
	// from a Service event must not overwrite a newer one from an
	// EndpointSlice event.
	mu      sync.Mutex
	stopped bool
}

func (k *Kube) watch(ctx context.Context, name string, client kubernetes.Interface, sink Sink) *clusterWatch {
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactory(client, 0)
	w := &clusterWatch{k: k, name: name, sink: sink, factory: f, cancel: cancel}
	pods, svcs, nss, eps := f.Core().V1().Pods(), f.Core().V1().Services(), f.Core().V1().Namespaces(), f.Discovery().V1().EndpointSlices()
	w.pods, w.services, w.namespaces, w.slices = pods.Lister(), svcs.Lister(), nss.Lister(), eps.Lister()
	handle := func(inf cache.SharedIndexInformer, on func(obj any, deleted bool)) {
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { on(o, false) },
			UpdateFunc: func(_, o any) { on(o, false) },
			DeleteFunc: func(o any) {
				if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = t.Obj
				}
				on(o, true)
			},
		})
		w.synced = append(w.synced, inf.HasSynced)
	}
	handle(pods.Informer(), func(o any, deleted bool) {
		if p, ok := o.(*corev1.Pod); ok {
			w.locked(func() { w.syncPod(p.Namespace, p.Name) })
		}
	})
	handle(svcs.Informer(), func(o any, _ bool) {
		if s, ok := o.(*corev1.Service); ok {
			w.locked(func() { w.syncService(s.Namespace, s.Name) })
		}
	})
	handle(eps.Informer(), func(o any, _ bool) {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" {
				w.locked(func() { w.syncService(s.Namespace, svc) })
			}
		}
	})
	handle(nss.Informer(), func(o any, _ bool) {
		if ns, ok := o.(*corev1.Namespace); ok {
			w.locked(func() { w.syncNamespace(ns.Name) })
		}
	})
	f.Start(ctx.Done())
	return w
}

func (w *clusterWatch) waitSynced(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), w.synced...)
}

// stop ends the informers; nothing reaches the sink afterwards.
func (w *clusterWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.cancel()
	w.factory.Shutdown()
}

func (w *clusterWatch) locked(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		f()
	}
}

func (w *clusterWatch) uid(ns, pod string) string { return w.name + "//Pod/" + ns + "/" + pod }

// network is the cluster's: its system namespace's label, else the default.
func (w *clusterWatch) network() string {
	if ns, err := w.namespaces.Get(w.k.cfg.SystemNamespace); err == nil {
		if n := ns.Labels[NetworkLabel]; n != "" {
			return n
		}
	}
	return w.k.cfg.Network
}

func (w *clusterWatch) syncNamespace(name string) {
	// Whether a pod is meshed depends on its namespace's label, and every
	// address's network on the system namespace's.
	var pods []*corev1.Pod
	if name == w.k.cfg.SystemNamespace {
		pods, _ = w.pods.List(labels.Everything())
		svcs, _ := w.services.List(labels.Everything())
		for _, s := range svcs {
			w.syncService(s.Namespace, s.Name)
		}
	} else {
		pods, _ = w.pods.Pods(name).List(labels.Everything())
	}
	for _, p := range pods {
		w.syncPod(p.Namespace, p.Name)
	}
}

func (w *clusterWatch) syncPod(ns, name string) {
	uid := w.uid(ns, name)
	pod, err := w.pods.Pods(ns).Get(name)
	if err != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		// A finished pod keeps its address in its status, and the
		// address goes to another pod.
		w.sink.DeleteWorkload(w.name, uid)
		return
	}
	var ips []netip.Addr
	for _, s := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(s.IP); err == nil {
			ips = append(ips, a.Unmap())
		}
	}
	if len(ips) == 0 {
		w.sink.DeleteWorkload(w.name, uid)
		return
	}
	namespace, _ := w.namespaces.Get(ns)
	network := pod.Labels[NetworkLabel]
	if network == "" {
		network = w.network()
	}
	w.sink.UpsertWorkload(Workload{
		UID: uid, Name: name, Namespace: ns,
		ServiceAccount: orDefault(pod.Spec.ServiceAccountName, "default"),
		TrustDomain:    w.k.cfg.TrustDomain,
		Node:           pod.Spec.NodeName,
		Cluster:        w.name,
		Network:        network,
		IPs:            ips,
		Ready:          pod.DeletionTimestamp == nil && podReady(pod),
		HBONE:          enroll.Meshed(pod, namespace, w.k.cfg.ExcludeNamespaces),
		HostNetwork:    pod.Spec.HostNetwork,
		Labels:         pod.Labels,
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (w *clusterWatch) syncService(ns, name string) {
	key := NamespacedName{ns, name}
	svc, err := w.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && svc.Spec.Type == corev1.ServiceTypeExternalName) {
		w.sink.DeleteService(w.name, key)
		return
	}
	if err != nil {
		w.k.cfg.Log.Warn("reading service from cache", "cluster", w.name, "service", key, "err", err)
		return
	}
	network := w.network()
	s := Service{Namespace: ns, Name: name, Hostname: name + "." + ns + ".svc." + w.k.cfg.Domain}
	for _, ip := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			s.VIPs = append(s.VIPs, NetworkAddr{network, a.Unmap()})
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		// A Service labelled with a network is that network's gateway, as
		// istiod discovers network gateways.
		s.GatewayFor = svc.Labels[NetworkLabel]
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				s.LoadBalancer = append(s.LoadBalancer, a.Unmap())
			}
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol != corev1.ProtocolTCP && p.Protocol != "" {
			continue // the proxy carries TCP only
		}
		port := Port{Name: p.Name, Port: uint16(p.Port)}
		switch {
		case p.TargetPort.Type == 0 && p.TargetPort.IntVal == 0:
			port.TargetPort = port.Port // unset: the service port
		case p.TargetPort.Type == 0:
			port.TargetPort = uint16(p.TargetPort.IntVal)
		}
		s.Ports = append(s.Ports, port)
	}
	sls, _ := w.slices.EndpointSlices(ns).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name}))
	byUID := map[string]int{} // dual-stack pods appear in one slice per family
	for _, sl := range sls {
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		targets := map[uint16]uint16{}
		for _, sp := range s.Ports {
			for _, p := range sl.Ports {
				if p.Port != nil && derefOr(p.Name, "") == sp.Name && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
					targets[sp.Port] = uint16(*p.Port)
				}
			}
		}
		for _, e := range sl.Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				uid := w.uid(orDefault(e.TargetRef.Namespace, ns), e.TargetRef.Name)
				if i, ok := byUID[uid]; ok {
					for p, t := range targets {
						s.Endpoints[i].Ports[p] = t
					}
					continue
				}
				byUID[uid] = len(s.Endpoints)
				ports := make(map[uint16]uint16, len(targets))
				for p, t := range targets {
					ports[p] = t
				}
				s.Endpoints = append(s.Endpoints, Endpoint{WorkloadUID: uid, Ports: ports, Ready: ready})
				continue
			}
			ep := Endpoint{Network: network, Ports: targets, Ready: ready}
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					ep.Addrs = append(ep.Addrs, ip.Unmap())
				}
			}
			if len(ep.Addrs) > 0 {
				s.Endpoints = append(s.Endpoints, ep)
			}
		}
	}
	w.sink.UpsertService(w.name, s)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func derefOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
