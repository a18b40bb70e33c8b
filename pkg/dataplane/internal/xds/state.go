package xds

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
)

// PolicySink is what the Authorization resources feed (a *policy.Store).
type PolicySink interface {
	SetAuthorization(key string, a *policy.Authorization)
}

// Reject is a resource the handler refused; it is NACKed with its reason
// and not recorded as held, so that a reconnect asks for it again.
type Reject struct {
	Name string
	Err  error
}

func (r Reject) String() string { return r.Name + ": " + r.Err.Error() }

// state turns WDS's shape into the model's. WDS sends services without
// endpoints: each workload names the services it backs (namespace/hostname)
// with their ports, as ztunnel's ServiceStore joins them; state keeps that
// join and feeds the model whole services.
type state struct {
	sink     model.Sink
	policies PolicySink
	// cluster is the one name every service view is fed under: istiod has
	// merged the clusters already.
	cluster string

	workloads map[string]*xdsWorkload    // by resource name (the UID)
	services  map[string]*xdsService     // by resource name (namespace/hostname)
	byHost    map[string]string          // namespace/hostname → resource name
	backends  map[string]map[string]bool // namespace/hostname → workload resource names
	authz     map[string]string          // resource name → store key
}

func newState(sink model.Sink, policies PolicySink, cluster string) *state {
	return &state{sink: sink, policies: policies, cluster: cluster,
		workloads: map[string]*xdsWorkload{}, services: map[string]*xdsService{},
		byHost: map[string]string{}, backends: map[string]map[string]bool{}, authz: map[string]string{}}
}

// handle applies one response of typeURL; the resources it could not
// decode or accept are returned, the rest is applied.
func (s *state) handle(typeURL string, resources []Resource, removed []string) []Reject {
	var rejects []Reject
	for _, r := range resources {
		var err error
		switch {
		case r.TypeURL != typeURL:
			err = fmt.Errorf("resource of type %s in a response of type %s", r.TypeURL, typeURL)
		case typeURL == AddressType:
			err = s.upsertAddress(r)
		case typeURL == AuthorizationType:
			err = s.upsertAuthorization(r)
		default:
			err = fmt.Errorf("unsubscribed type %s", typeURL)
		}
		if err != nil {
			rejects = append(rejects, Reject{Name: r.Name, Err: err})
		}
	}
	for _, name := range removed {
		switch typeURL {
		case AddressType:
			s.removeAddress(name)
		case AuthorizationType:
			if key, ok := s.authz[name]; ok {
				delete(s.authz, name)
				s.policies.SetAuthorization(key, nil)
			}
		}
	}
	return rejects
}

func (s *state) upsertAddress(r Resource) error {
	w, svc, err := unmarshalAddress(r.Value)
	if err != nil {
		return err
	}
	if w != nil {
		return s.upsertWorkload(r.Name, w)
	}
	return s.upsertService(r.Name, svc)
}

func (s *state) upsertWorkload(name string, w *xdsWorkload) error {
	if w.UID == "" {
		return errors.New("workload has no uid")
	}
	// As ztunnel: an empty trust domain or service account is the default
	// (Istio's trust domain, which is ours).
	if w.TrustDomain == "" {
		w.TrustDomain = ambient.DefaultTrustDomain
	}
	if w.ServiceAccount == "" {
		w.ServiceAccount = "default"
	}
	if old := s.workloads[name]; old != nil && old.UID != w.UID {
		s.sink.DeleteWorkload(old.ClusterID, old.UID)
	}
	affected := map[string]bool{}
	if old := s.workloads[name]; old != nil {
		for host := range old.Services {
			affected[host] = true
			delete(s.backends[host], name)
		}
	}
	s.workloads[name] = w
	for host := range w.Services {
		affected[host] = true
		if s.backends[host] == nil {
			s.backends[host] = map[string]bool{}
		}
		s.backends[host][name] = true
	}
	s.sink.UpsertWorkload(model.Workload{
		UID: w.UID, Name: w.Name, Namespace: w.Namespace, ServiceAccount: w.ServiceAccount,
		TrustDomain: w.TrustDomain, Node: w.Node, Cluster: w.ClusterID, Network: w.Network,
		IPs: w.Addresses, Ready: w.Healthy, HBONE: w.HBONE, HostNetwork: w.HostNetwork,
		AuthorizationPolicies: w.AuthorizationPolicies,
	})
	s.refresh(affected)
	return nil
}

func (s *state) upsertService(name string, svc *xdsService) error {
	if svc.Name == "" || svc.Namespace == "" {
		return errors.New("service has no name or namespace")
	}
	host := svc.Namespace + "/" + svc.Hostname
	if old := s.services[name]; old != nil {
		oldHost := old.Namespace + "/" + old.Hostname
		if oldKey, newKey := (model.NamespacedName{Namespace: old.Namespace, Name: old.Name}),
			(model.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}); oldKey != newKey {
			s.sink.DeleteService(s.cluster, oldKey)
		}
		if oldHost != host {
			delete(s.byHost, oldHost)
		}
	}
	s.services[name] = svc
	s.byHost[host] = name
	s.refresh(map[string]bool{host: true})
	return nil
}

func (s *state) removeAddress(name string) {
	if w, ok := s.workloads[name]; ok {
		delete(s.workloads, name)
		affected := map[string]bool{}
		for host := range w.Services {
			affected[host] = true
			delete(s.backends[host], name)
			if len(s.backends[host]) == 0 {
				delete(s.backends, host)
			}
		}
		s.sink.DeleteWorkload(w.ClusterID, w.UID)
		s.refresh(affected)
		return
	}
	if svc, ok := s.services[name]; ok {
		delete(s.services, name)
		delete(s.byHost, svc.Namespace+"/"+svc.Hostname)
		s.sink.DeleteService(s.cluster, model.NamespacedName{Namespace: svc.Namespace, Name: svc.Name})
	}
}

// refresh feeds the model the services of hosts, endpoints joined. A host
// whose Service resource has not arrived yet is kept until it does.
func (s *state) refresh(hosts map[string]bool) {
	for host := range hosts {
		name, ok := s.byHost[host]
		if !ok {
			continue
		}
		svc := s.services[name]
		out := model.Service{Namespace: svc.Namespace, Name: svc.Name, Hostname: svc.Hostname}
		for _, a := range svc.Addresses {
			out.VIPs = append(out.VIPs, model.NetworkAddr{Network: a.Network, Addr: a.Addr})
		}
		for _, p := range svc.Ports {
			out.Ports = append(out.Ports, model.Port{Port: uint16(p.ServicePort), TargetPort: uint16(p.TargetPort)})
		}
		for wname := range s.backends[host] {
			w := s.workloads[wname]
			ep := model.Endpoint{WorkloadUID: w.UID, Ready: w.Healthy, Ports: map[uint16]uint16{}}
			for _, p := range w.Services[host] {
				if p.TargetPort != 0 {
					ep.Ports[uint16(p.ServicePort)] = uint16(p.TargetPort)
				}
			}
			out.Endpoints = append(out.Endpoints, ep)
		}
		// Deterministic order, for dumps and tests.
		slices.SortFunc(out.Endpoints, func(a, b model.Endpoint) int { return cmp.Compare(a.WorkloadUID, b.WorkloadUID) })
		s.sink.UpsertService(s.cluster, out)
	}
}

func (s *state) upsertAuthorization(r Resource) error {
	a, err := unmarshalAuthorization(r.Value)
	if err != nil {
		return err
	}
	if a.Name == "" {
		return errors.New("authorization has no name")
	}
	key := a.Key()
	if old, ok := s.authz[r.Name]; ok && old != key {
		s.policies.SetAuthorization(old, nil)
	}
	s.authz[r.Name] = key
	s.policies.SetAuthorization(key, a)
	return nil
}

// joinRejects is the NACK's error_detail, as ztunnel writes it.
func joinRejects(rs []Reject) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}
