package model

import (
	"net/netip"
	"slices"
	"strings"
)

// Dump is the model in ztunnel's config_dump shape.
type Dump struct {
	Workloads []WorkloadDump `json:"workloads"`
	Services  []ServiceDump  `json:"services"`
}

// WorkloadDump is one workload, with ztunnel's field names.
type WorkloadDump struct {
	UID            string       `json:"uid"`
	WorkloadIPs    []netip.Addr `json:"workloadIps"`
	Protocol       string       `json:"protocol"`
	Name           string       `json:"name"`
	Namespace      string       `json:"namespace"`
	TrustDomain    string       `json:"trustDomain,omitempty"`
	ServiceAccount string       `json:"serviceAccount,omitempty"`
	Network        string       `json:"network,omitempty"`
	Node           string       `json:"node,omitempty"`
	Status         string       `json:"status"`
	ClusterID      string       `json:"clusterId"`
	Services       []string     `json:"services,omitempty"`
	// AuthorizationPolicies: those istiod bound to the workload (XDS source).
	AuthorizationPolicies []string `json:"authorizationPolicies,omitempty"`
}

// ServiceDump is one merged service, with ztunnel's field names.
type ServiceDump struct {
	Name            string                  `json:"name"`
	Namespace       string                  `json:"namespace"`
	Hostname        string                  `json:"hostname"`
	VIPs            []string                `json:"vips"`
	Ports           map[uint16]uint16       `json:"ports"`
	Endpoints       map[string]EndpointDump `json:"endpoints"`
	SubjectAltNames []string                `json:"subjectAltNames"`
}

// EndpointDump is one endpoint of a service, keyed by workload UID.
type EndpointDump struct {
	WorkloadUID string            `json:"workloadUid"`
	Port        map[uint16]uint16 `json:"port"`
	Status      string            `json:"status"`
}

func health(ok bool) string {
	if ok {
		return "Healthy"
	}
	return "Unhealthy"
}

// Dump returns the model, sorted by UID and namespace/name.
func (m *Model) Dump() Dump {
	m.mu.RLock()
	defer m.mu.RUnlock()
	d := Dump{Workloads: []WorkloadDump{}, Services: []ServiceDump{}}
	member := map[string][]string{} // workload UID → ns/hostname of its services
	for _, s := range m.services {
		sd := ServiceDump{
			Name: s.Name, Namespace: s.Namespace, Hostname: s.Hostname,
			VIPs: []string{}, Ports: map[uint16]uint16{}, Endpoints: map[string]EndpointDump{}, SubjectAltNames: []string{},
		}
		for _, v := range s.VIPs {
			sd.VIPs = append(sd.VIPs, v.String())
		}
		for _, p := range s.Ports {
			sd.Ports[p.Port] = p.TargetPort
		}
		for _, ep := range s.Endpoints {
			key, ready := ep.WorkloadUID, ep.Ready
			if key == "" && len(ep.Addrs) > 0 {
				key = NetworkAddr{ep.Network, ep.Addrs[0]}.String()
			}
			if w := m.workloads[ep.WorkloadUID]; w != nil {
				ready = ready && w.Ready
				member[w.UID] = append(member[w.UID], s.Namespace+"/"+s.Hostname)
			}
			ports := map[uint16]uint16{}
			for _, p := range s.Ports {
				if t := cmpOr(ep.Ports[p.Port], p.TargetPort); t != 0 {
					ports[p.Port] = t
				}
			}
			sd.Endpoints[key] = EndpointDump{WorkloadUID: key, Port: ports, Status: health(ready)}
		}
		d.Services = append(d.Services, sd)
	}
	for _, w := range m.workloads {
		proto := "TCP"
		if w.HBONE {
			proto = "HBONE"
		}
		svcs := member[w.UID]
		slices.Sort(svcs)
		d.Workloads = append(d.Workloads, WorkloadDump{
			UID: w.UID, WorkloadIPs: slices.Clone(w.IPs), Protocol: proto, Name: w.Name, Namespace: w.Namespace,
			TrustDomain: w.TrustDomain, ServiceAccount: w.ServiceAccount, Network: w.Network, Node: w.Node,
			Status: health(w.Ready), ClusterID: w.Cluster, Services: svcs,
			AuthorizationPolicies: slices.Clone(w.AuthorizationPolicies),
		})
	}
	slices.SortFunc(d.Workloads, func(a, b WorkloadDump) int { return strings.Compare(a.UID, b.UID) })
	slices.SortFunc(d.Services, func(a, b ServiceDump) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return d
}

func cmpOr(a, b uint16) uint16 {
	if a != 0 {
		return a
	}
	return b
}
