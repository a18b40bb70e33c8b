package model

import (
	"cmp"
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
)

// NetworkAddr is an address within a network: pod and service addresses are
// unique only within theirs, as in ztunnel.
type NetworkAddr struct {
	Network string
	Addr    netip.Addr
}

// String is ztunnel's form, network/ip.
func (a NetworkAddr) String() string { return a.Network + "/" + a.Addr.String() }

// NamespacedName names a service, across clusters.
type NamespacedName struct{ Namespace, Name string }

func (n NamespacedName) String() string { return n.Namespace + "/" + n.Name }

// Workload is one pod of one cluster.
type Workload struct {
	// UID is unique across clusters (ztunnel's <cluster>//Pod/<ns>/<name>).
	UID            string
	Name           string
	Namespace      string
	ServiceAccount string
	TrustDomain    string
	Node           string
	Cluster        string
	Network        string
	IPs            []netip.Addr
	// Ready: the pod is Ready; only ready pods receive service traffic.
	Ready bool
	// HBONE: the pod is in the mesh, so its node proxy takes HBONE on
	// 15008; otherwise it is reached in plain TCP.
	HBONE bool
	// HostNetwork: the pod shares its node's addresses, so they do not
	// name it; it is reached only as a service endpoint.
	HostNetwork bool
	// Labels are the pod's, for policies' workload selectors (read only).
	Labels map[string]string
	// AuthorizationPolicies are the namespace/name of the workload-selector
	// policies istiod found selecting it (the XDS source: WDS carries no
	// labels, istiod selects).
	AuthorizationPolicies []string
}

// Identity is the workload's SPIFFE identity.
func (w *Workload) Identity() identity.Identity {
	return identity.New(w.TrustDomain, w.Namespace, w.ServiceAccount)
}

// Port is one service port.
type Port struct {
	Name string
	Port uint16
	// TargetPort is 0 when the target port is named: it is then resolved
	// per endpoint (Endpoint.Ports).
	TargetPort uint16
}

// Endpoint is one backend of a service.
type Endpoint struct {
	// WorkloadUID is the pod behind the endpoint. Empty for an address not
	// backed by a pod (the API server behind `kubernetes`, manual
	// EndpointSlices): such endpoints are plain TCP, without identity.
	WorkloadUID string
	// Addrs and Network: the address-only endpoint's addresses.
	Addrs   []netip.Addr
	Network string
	// Ports maps service port to this endpoint's target port (named target
	// ports resolve differently per pod).
	Ports map[uint16]uint16
	// Ready is the EndpointSlice's ready condition.
	Ready bool
}

// Service is one cluster's view of a service, as sources give it.
type Service struct {
	Namespace string
	Name      string
	Hostname  string
	VIPs      []NetworkAddr
	Ports     []Port
	Endpoints []Endpoint
	// GatewayFor names the network this service is the east-west gateway
	// of (Istio's topology.istio.io/network label on a Service): its
	// LoadBalancer addresses reach that network from the others.
	GatewayFor string
	// LoadBalancer is the service's external (load-balancer ingress)
	// addresses.
	LoadBalancer []netip.Addr
}

// Sink is what a source feeds: per cluster, so that the model can merge
// clusters and forget one whose remote secret goes away. A source that
// gives merged objects (istiod) uses one cluster name for everything.
type Sink interface {
	UpsertWorkload(w Workload)
	DeleteWorkload(cluster, uid string)
	UpsertService(cluster string, s Service)
	DeleteService(cluster string, key NamespacedName)
	// DeleteCluster forgets everything of cluster.
	DeleteCluster(cluster string)
	// MarkSynced says the source's first full view has been fed: before
	// that, unknown destinations may only be unknown yet.
	MarkSynced()
}

// Source feeds a Sink until ctx ends.
type Source interface {
	Run(ctx context.Context, sink Sink) error
}

// Upstream is where an outbound connection goes.
type Upstream struct {
	// Addr is the endpoint's ip:targetPort, or the destination as given.
	Addr netip.AddrPort
	// Identity is the server's expected identity; zero for plain TCP.
	Identity identity.Identity
	// HBONE: tunnel to Addr's 15008; otherwise connect in plain TCP.
	HBONE bool
	// WorkloadUID is the chosen workload, empty for an address-only endpoint.
	WorkloadUID string
	// Service is set when the destination was a service VIP.
	Service NamespacedName

	// Gateway is set when the endpoint is on another network: the
	// connection goes through that network's east-west gateway as
	// ztunnel's double HBONE (an outer tunnel to Gateway, proving
	// GatewayIdentity, and inside it a tunnel to whichever endpoint the
	// gateway picks). Both CONNECTs name the service, Hostname:ServicePort,
	// and the inner server must be one of Identities: any ready endpoint
	// of the service on that network. Addr, Identity and WorkloadUID are
	// then the endpoint this proxy picked, which the gateway may not.
	Gateway         netip.AddrPort
	GatewayIdentity identity.Identity
	GatewayNetwork  string
	Hostname        string
	ServicePort     uint16
	Identities      []identity.Identity
}

// Result says what Resolve found.
type Result uint8

const (
	// NotFound: the destination is neither a VIP nor a workload address.
	NotFound Result = iota
	// Found: Upstream is set.
	Found
	// NoPort: a service VIP on a port the service does not have.
	NoPort
	// NoEndpoint: a service VIP with no ready endpoint reachable from here.
	NoEndpoint
	// NoGateway: a service VIP whose only ready endpoints are on networks
	// whose east-west gateway is not known (no address, or no ready pod
	// to say which identity it proves).
	NoGateway
)

// String is the Result as a metric label.
func (r Result) String() string {
	switch r {
	case Found:
		return "found"
	case NoPort:
		return "unknown_service_port"
	case NoEndpoint:
		return "no_healthy_endpoint"
	case NoGateway:
		return "no_network_gateway"
	}
	return "unknown_destination"
}

// Interface is the model as the proxy uses it: fed as a Sink, consulted by
// Resolve on every outbound connection, shown by Dump.
type Interface interface {
	Sink
	Resolve(dst netip.AddrPort) (Upstream, Result)
	// WorkloadAt is the namespace and labels of the workload at addr on
	// this proxy's network, for authorization policies.
	WorkloadAt(addr netip.Addr) (namespace string, labels map[string]string, ok bool)
	// BoundPoliciesAt is the AuthorizationPolicies istiod bound to the
	// workload at addr on this proxy's network (nil from the standalone
	// source, which selects by labels).
	BoundPoliciesAt(addr netip.Addr) []string
	Synced() bool
	Dump() Dump
	// InboundTarget is where an inbound tunnel whose :authority names a
	// service (host:port, as a network gateway forwards them) goes: the
	// target port of that service's endpoint at dst, on this network.
	InboundTarget(host string, port uint16, dst netip.Addr) (netip.AddrPort, bool)
	// GatewayTarget is where this proxy, as the east-west gateway of its
	// network, forwards a tunnel for service host:port: a ready HBONE
	// endpoint on this network, at its node proxy's port 15008.
	GatewayTarget(host string, port uint16) (netip.AddrPort, bool)
}

// WorkloadAt implements Interface; a ready workload wins over a finished
// one that held the same address.
func (m *Model) WorkloadAt(addr netip.Addr) (string, map[string]string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	w := m.workloadAtLocked(addr)
	if w == nil {
		return "", nil, false
	}
	return w.Namespace, w.Labels, true
}

// BoundPoliciesAt implements Interface.
func (m *Model) BoundPoliciesAt(addr netip.Addr) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if w := m.workloadAtLocked(addr); w != nil {
		return w.AuthorizationPolicies
	}
	return nil
}

func (m *Model) workloadAtLocked(addr netip.Addr) *Workload {
	ws := m.byIP[NetworkAddr{Network: m.network, Addr: addr.Unmap()}]
	if len(ws) == 0 {
		return nil
	}
	w := ws[0]
	for _, c := range ws[1:] {
		if c.Ready && !w.Ready {
			w = c
		}
	}
	return w
}

// Model is the in-memory Interface.
type Model struct {
	cluster, network string
	synced           atomic.Bool

	mu        sync.RWMutex
	workloads map[string]*Workload
	clusterWl map[string]map[string]struct{} // cluster → workload UIDs
	byIP      map[NetworkAddr][]*Workload
	inputs    map[NamespacedName]map[string]*Service // per cluster
	services  map[NamespacedName]*service            // merged
	byVIP     map[NetworkAddr][]vipRef
	byHost    map[string]*service
	// gatewayKeys are the services some cluster's view marks as a network
	// gateway (Service.GatewayFor); views, not the merge, say which network
	// each cluster's gateway is for.
	gatewayKeys map[NamespacedName]struct{}
}

// service is the merge of every cluster's Service of one namespace/name.
type service struct {
	Service
	vipClusters []string          // the cluster of each VIP
	targets     map[uint16]uint16 // service port → numeric target port (0: named)
}

type vipRef struct {
	svc     *service
	cluster string
}

// New returns an empty model for a proxy in cluster on network: VIPs that
// clash between clusters resolve to the local cluster's service, and only
// endpoints on network are reached directly.
func New(cluster, network string) *Model {
	return &Model{
		cluster: cluster, network: network,
		workloads: map[string]*Workload{},
		clusterWl: map[string]map[string]struct{}{},
		byIP:      map[NetworkAddr][]*Workload{},
		inputs:    map[NamespacedName]map[string]*Service{},
		services:  map[NamespacedName]*service{},
		byVIP:     map[NetworkAddr][]vipRef{},
		byHost:    map[string]*service{},

		gatewayKeys: map[NamespacedName]struct{}{},
	}
}

// UpsertWorkload adds or replaces a workload.
func (m *Model) UpsertWorkload(w Workload) {
	w.IPs, w.AuthorizationPolicies = slices.Clone(w.IPs), slices.Clone(w.AuthorizationPolicies)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleteWorkloadLocked(w.UID)
	m.workloads[w.UID] = &w
	if m.clusterWl[w.Cluster] == nil {
		m.clusterWl[w.Cluster] = map[string]struct{}{}
	}
	m.clusterWl[w.Cluster][w.UID] = struct{}{}
	if w.HostNetwork {
		return
	}
	for _, ip := range w.IPs {
		k := NetworkAddr{w.Network, ip}
		m.byIP[k] = append(m.byIP[k], &w)
	}
}

// DeleteWorkload removes a workload.
func (m *Model) DeleteWorkload(cluster, uid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleteWorkloadLocked(uid)
}

func (m *Model) deleteWorkloadLocked(uid string) {
	old, ok := m.workloads[uid]
	if !ok {
		return
	}
	delete(m.workloads, uid)
	delete(m.clusterWl[old.Cluster], uid)
	if len(m.clusterWl[old.Cluster]) == 0 {
		delete(m.clusterWl, old.Cluster)
	}
	for _, ip := range old.IPs {
		k := NetworkAddr{old.Network, ip}
		ws := slices.DeleteFunc(m.byIP[k], func(w *Workload) bool { return w == old })
		if len(ws) == 0 {
			delete(m.byIP, k)
		} else {
			m.byIP[k] = ws
		}
	}
}

// UpsertService adds or replaces cluster's view of a service.
func (m *Model) UpsertService(cluster string, s Service) {
	key := NamespacedName{s.Namespace, s.Name}
	s.VIPs, s.Ports, s.Endpoints = slices.Clone(s.VIPs), slices.Clone(s.Ports), slices.Clone(s.Endpoints)
	s.LoadBalancer = slices.Clone(s.LoadBalancer)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inputs[key] == nil {
		m.inputs[key] = map[string]*Service{}
	}
	m.inputs[key][cluster] = &s
	m.remergeLocked(key)
}

// DeleteService removes cluster's view of a service; the service stays
// while another cluster has it.
func (m *Model) DeleteService(cluster string, key NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.inputs[key][cluster]; !ok {
		return
	}
	delete(m.inputs[key], cluster)
	m.remergeLocked(key)
}

// DeleteCluster forgets every workload and service view of cluster.
func (m *Model) DeleteCluster(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.clusterWl[cluster] {
		m.deleteWorkloadLocked(uid)
	}
	for key, byCluster := range m.inputs {
		if _, ok := byCluster[cluster]; ok {
			delete(byCluster, cluster)
			m.remergeLocked(key)
		}
	}
}

// MarkSynced records that the source's first full view is in.
func (m *Model) MarkSynced() { m.synced.Store(true) }

// Synced reports whether MarkSynced was called.
func (m *Model) Synced() bool { return m.synced.Load() }

// remergeLocked rebuilds the merged service key from every cluster's view
// and reindexes its VIPs. The local cluster comes first, then the others
// by name, so that a port defined differently in two clusters takes the
// local definition, deterministically.
func (m *Model) remergeLocked(key NamespacedName) {
	if old, ok := m.services[key]; ok {
		for _, vip := range old.VIPs {
			refs := slices.DeleteFunc(m.byVIP[vip], func(r vipRef) bool { return r.svc == old })
			if len(refs) == 0 {
				delete(m.byVIP, vip)
			} else {
				m.byVIP[vip] = refs
			}
		}
		delete(m.services, key)
		if m.byHost[old.Hostname] == old {
			delete(m.byHost, old.Hostname)
		}
	}
	delete(m.gatewayKeys, key)
	views := m.inputs[key]
	if len(views) == 0 {
		delete(m.inputs, key)
		return
	}
	for _, v := range views {
		if v.GatewayFor != "" {
			m.gatewayKeys[key] = struct{}{}
		}
	}
	clusters := make([]string, 0, len(views))
	for c := range views {
		clusters = append(clusters, c)
	}
	slices.SortFunc(clusters, func(a, b string) int {
		if (a == m.cluster) != (b == m.cluster) {
			if a == m.cluster {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	s := &service{targets: map[uint16]uint16{}}
	s.Namespace, s.Name = key.Namespace, key.Name
	for _, c := range clusters {
		v := views[c]
		if s.Hostname == "" {
			s.Hostname = v.Hostname
		}
		for _, vip := range v.VIPs {
			if !slices.Contains(s.VIPs, vip) {
				s.VIPs = append(s.VIPs, vip)
				s.vipClusters = append(s.vipClusters, c)
			}
		}
		for _, p := range v.Ports {
			if _, ok := s.targets[p.Port]; !ok {
				s.targets[p.Port] = p.TargetPort
				s.Ports = append(s.Ports, p)
			}
		}
		s.Endpoints = append(s.Endpoints, v.Endpoints...)
	}
	m.services[key] = s
	if s.Hostname != "" {
		m.byHost[s.Hostname] = s
	}
	for i, vip := range s.VIPs {
		m.byVIP[vip] = append(m.byVIP[vip], vipRef{svc: s, cluster: s.vipClusters[i]})
	}
}

// Resolve decides where a connection to dst goes: a service VIP picks a
// ready endpoint at random (as ztunnel does without a
// load-balancing policy) and maps the port to its target port; a workload
// address goes to that workload. It allocates nothing, but for an
// endpoint on another network (see Upstream.Gateway).
func (m *Model) Resolve(dst netip.AddrPort) (Upstream, Result) {
	addr := dst.Addr().Unmap()
	k := NetworkAddr{m.network, addr}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if refs := m.byVIP[k]; len(refs) > 0 {
		s := refs[0].svc
		for _, r := range refs[1:] {
			if r.cluster == m.cluster {
				s = r.svc
			}
		}
		if _, ok := s.targets[dst.Port()]; !ok {
			return Upstream{}, NoPort
		}
		up, res := m.pickLocked(s, dst.Port(), addr.Is6())
		if res != Found {
			return Upstream{}, res
		}
		up.Service = NamespacedName{s.Namespace, s.Name}
		return up, Found
	}
	ws := m.byIP[k]
	if len(ws) == 0 {
		return Upstream{}, NotFound
	}
	w := ws[0]
	for _, c := range ws[1:] {
		if c.Ready && !w.Ready {
			w = c // an IP still held by a finished pod and reused by a new one
		}
	}
	up := Upstream{Addr: netip.AddrPortFrom(addr, dst.Port()), HBONE: w.HBONE, WorkloadUID: w.UID}
	if w.HBONE {
		up.Identity = w.Identity()
	}
	return up, Found
}

// pickLocked chooses uniformly among s's usable endpoints, in two passes
// so as not to allocate (but for an endpoint on another network, which
// needs the set of identities behind its gateway).
func (m *Model) pickLocked(s *service, port uint16, v6 bool) (Upstream, Result) {
	n, noGateway := 0, false
	for i := range s.Endpoints {
		switch _, u := m.usableLocked(s, &s.Endpoints[i], port, v6); u {
		case usable:
			n++
		case gatewayUnknown:
			noGateway = true
		}
	}
	if n == 0 {
		if noGateway {
			return Upstream{}, NoGateway
		}
		return Upstream{}, NoEndpoint
	}
	k := rand.IntN(n)
	for i := range s.Endpoints {
		if up, u := m.usableLocked(s, &s.Endpoints[i], port, v6); u == usable {
			if k > 0 {
				k--
				continue
			}
			if up.Gateway.IsValid() {
				up.Hostname, up.ServicePort = s.Hostname, port
				up.Identities = m.identitiesLocked(s, up.GatewayNetwork)
			}
			return up, Found
		}
	}
	return Upstream{}, NoEndpoint
}

// usability says whether an endpoint can take a connection from here.
type usability uint8

const (
	unusable usability = iota
	usable
	// gatewayUnknown: ready, but on a network without a known gateway.
	gatewayUnknown
)

// usableLocked says whether ep can take a connection to service port port
// from here, and where it would go: ready, with an address of the
// destination's family and a target port, and on this network or, meshed,
// on one whose east-west gateway is known.
func (m *Model) usableLocked(s *service, ep *Endpoint, port uint16, v6 bool) (Upstream, usability) {
	if !ep.Ready {
		return Upstream{}, unusable
	}
	target := ep.Ports[port]
	if target == 0 {
		target = s.targets[port]
	}
	if target == 0 {
		return Upstream{}, unusable
	}
	addrs, network := ep.Addrs, ep.Network
	var w *Workload
	if ep.WorkloadUID != "" {
		w = m.workloads[ep.WorkloadUID]
		if w == nil || !w.Ready {
			return Upstream{}, unusable
		}
		addrs, network = w.IPs, w.Network
	}
	if network != m.network {
		// Only the mesh crosses networks, inside a tunnel the gateway can
		// forward without reading it: plain TCP endpoints there are out
		// of reach, as in ztunnel.
		if w == nil || !w.HBONE || len(addrs) == 0 {
			return Upstream{}, unusable
		}
		gw, gwID, ok := m.gatewayLocked(network, v6)
		if !ok {
			return Upstream{}, gatewayUnknown
		}
		a := addrs[0]
		for _, x := range addrs {
			if x.Is6() == v6 {
				a = x
				break
			}
		}
		return Upstream{
			Addr: netip.AddrPortFrom(a, target), Identity: w.Identity(), HBONE: true, WorkloadUID: w.UID,
			Gateway: gw, GatewayIdentity: gwID, GatewayNetwork: network,
		}, usable
	}
	for _, a := range addrs {
		if a.Is6() == v6 {
			up := Upstream{Addr: netip.AddrPortFrom(a, target)}
			if w != nil {
				up.WorkloadUID, up.HBONE = w.UID, w.HBONE
				if w.HBONE {
					up.Identity = w.Identity()
				}
			}
			return up, usable
		}
	}
	return Upstream{}, unusable
}

// gatewayLocked finds network's east-west gateway: a service some
// cluster marks as the network's gateway, with a load-balancer address
// (of the destination's family if it has one), HBONE's port, and ready
// pods that all have one identity — the identity the outer tunnel
// requires. Pods that disagree leave nothing to require: not usable.
func (m *Model) gatewayLocked(network string, v6 bool) (netip.AddrPort, identity.Identity, bool) {
	for key := range m.gatewayKeys {
		for _, v := range m.inputs[key] {
			if v.GatewayFor != network || len(v.LoadBalancer) == 0 ||
				!slices.ContainsFunc(v.Ports, func(p Port) bool { return p.Port == ambient.PortHBONE }) {
				continue
			}
			var id identity.Identity
			agree := true
			for i := range v.Endpoints {
				ep := &v.Endpoints[i]
				w := m.workloads[ep.WorkloadUID]
				if !ep.Ready || w == nil || !w.Ready {
					continue
				}
				switch wid := w.Identity(); {
				case id.IsZero():
					id = wid
				case id != wid:
					agree = false
				}
			}
			if id.IsZero() || !agree {
				continue
			}
			a := v.LoadBalancer[0]
			for _, x := range v.LoadBalancer {
				if x.Is6() == v6 {
					a = x
					break
				}
			}
			return netip.AddrPortFrom(a, ambient.PortHBONE), id, true
		}
	}
	return netip.AddrPort{}, identity.Identity{}, false
}

// identitiesLocked are the identities of s's ready meshed endpoints on
// network: the gateway may pick any of them, so the inner tunnel accepts
// any (ztunnel's service SANs).
func (m *Model) identitiesLocked(s *service, network string) []identity.Identity {
	var ids []identity.Identity
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		w := m.workloads[ep.WorkloadUID]
		if !ep.Ready || w == nil || !w.Ready || !w.HBONE || w.Network != network {
			continue
		}
		if id := w.Identity(); !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// InboundTarget implements Interface.
func (m *Model) InboundTarget(host string, port uint16, dst netip.Addr) (netip.AddrPort, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.byHost[host]
	if s == nil {
		return netip.AddrPort{}, false
	}
	target, ok := s.targets[port]
	if !ok {
		return netip.AddrPort{}, false
	}
	dst = dst.Unmap()
	for _, w := range m.byIP[NetworkAddr{m.network, dst}] {
		for i := range s.Endpoints {
			if s.Endpoints[i].WorkloadUID == w.UID {
				if t := s.Endpoints[i].Ports[port]; t != 0 {
					target = t
				}
				if target == 0 {
					return netip.AddrPort{}, false
				}
				return netip.AddrPortFrom(dst, target), true
			}
		}
	}
	return netip.AddrPort{}, false
}

// GatewayTarget implements Interface: a ready meshed endpoint of the
// service on this network, chosen uniformly, at its port 15008.
func (m *Model) GatewayTarget(host string, port uint16) (netip.AddrPort, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.byHost[host]
	if s == nil {
		return netip.AddrPort{}, false
	}
	if _, ok := s.targets[port]; !ok {
		return netip.AddrPort{}, false
	}
	var picked netip.Addr
	n := 0
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		w := m.workloads[ep.WorkloadUID]
		if !ep.Ready || w == nil || !w.Ready || !w.HBONE || w.Network != m.network || len(w.IPs) == 0 {
			continue
		}
		if ep.Ports[port] == 0 && s.targets[port] == 0 {
			continue // a named target port this pod does not have
		}
		n++
		if rand.IntN(n) == 0 { // reservoir sampling: uniform in one pass
			picked = w.IPs[0]
		}
	}
	if n == 0 {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(picked, ambient.PortHBONE), true
}
