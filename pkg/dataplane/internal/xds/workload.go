package xds

import (
	"errors"
	"fmt"
	"net/netip"
)

// Enum values of workload.proto that matter here.
const (
	tunnelHBONE       = 1 // TunnelProtocol.HBONE
	statusHealthy     = 0 // WorkloadStatus.HEALTHY
	networkHost       = 1 // NetworkMode.HOST_NETWORK
	addressWorkload   = 1 // Address.workload
	addressService    = 2 // Address.service
	wlUID             = 20
	wlName            = 1
	wlNamespace       = 2
	wlAddresses       = 3
	wlNetwork         = 4
	wlTunnel          = 5
	wlTrustDomain     = 6
	wlServiceAccount  = 7
	wlNode            = 9
	wlServices        = 22
	wlAuthzPolicies   = 16
	wlStatus          = 17
	wlClusterID       = 18
	wlNetworkMode     = 25
	svcName           = 1
	svcNamespace      = 2
	svcHostname       = 3
	svcAddresses      = 4
	svcPorts          = 5
	svcSubjectAltName = 6
)

// xdsWorkload is istio.workload.Workload, as far as the model uses it.
type xdsWorkload struct {
	UID, Name, Namespace        string
	Addresses                   []netip.Addr
	Network                     string
	HBONE                       bool
	TrustDomain, ServiceAccount string
	Node, ClusterID             string
	Healthy, HostNetwork        bool
	AuthorizationPolicies       []string
	// Services maps "namespace/hostname" to service port → target port.
	Services map[string][]xdsPort
}

type xdsPort struct{ ServicePort, TargetPort uint32 }

// xdsService is istio.workload.Service.
type xdsService struct {
	Name, Namespace, Hostname string
	Addresses                 []networkAddress
	Ports                     []xdsPort
	SubjectAltNames           []string
}

type networkAddress struct {
	Network string
	Addr    netip.Addr
}

// unmarshalAddress decodes istio.workload.Address: exactly one of the
// results is non-nil.
func unmarshalAddress(b []byte) (*xdsWorkload, *xdsService, error) {
	var (
		w *xdsWorkload
		s *xdsService
	)
	err := walk(b, func(f field) error {
		switch f.num {
		case addressWorkload:
			m, err := f.msg()
			if err != nil {
				return err
			}
			w, s = nil, nil // a oneof: the last one wins
			w, err = unmarshalWorkload(m)
			return err
		case addressService:
			m, err := f.msg()
			if err != nil {
				return err
			}
			w, s = nil, nil
			s, err = unmarshalService(m)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if w == nil && s == nil {
		return nil, nil, errors.New("unknown address type: neither a workload nor a service")
	}
	return w, s, nil
}

func unmarshalWorkload(b []byte) (*xdsWorkload, error) {
	w := &xdsWorkload{Healthy: true}
	err := walk(b, func(f field) error {
		var err error
		var v uint64
		switch f.num {
		case wlUID:
			w.UID, err = f.str()
		case wlName:
			w.Name, err = f.str()
		case wlNamespace:
			w.Namespace, err = f.str()
		case wlAddresses:
			var raw []byte
			if raw, err = f.msg(); err == nil {
				a, ok := netip.AddrFromSlice(raw)
				if !ok {
					return fmt.Errorf("workload address: %d bytes is neither IPv4 nor IPv6", len(raw))
				}
				w.Addresses = append(w.Addresses, a.Unmap())
			}
		case wlNetwork:
			w.Network, err = f.str()
		case wlTunnel:
			v, err = f.uint()
			w.HBONE = v == tunnelHBONE
		case wlTrustDomain:
			w.TrustDomain, err = f.str()
		case wlServiceAccount:
			w.ServiceAccount, err = f.str()
		case wlNode:
			w.Node, err = f.str()
		case wlServices:
			var m []byte
			if m, err = f.msg(); err == nil {
				err = w.unmarshalServiceEntry(m)
			}
		case wlAuthzPolicies:
			var s string
			s, err = f.str()
			w.AuthorizationPolicies = append(w.AuthorizationPolicies, s)
		case wlStatus:
			v, err = f.uint()
			w.Healthy = v == statusHealthy
		case wlClusterID:
			w.ClusterID, err = f.str()
		case wlNetworkMode:
			v, err = f.uint()
			w.HostNetwork = v == networkHost
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("decoding Workload: %w", err)
	}
	return w, nil
}

// unmarshalServiceEntry decodes one entry of map<string, PortList> services.
func (w *xdsWorkload) unmarshalServiceEntry(b []byte) error {
	var key string
	var ports []xdsPort
	err := walk(b, func(f field) error {
		switch f.num {
		case 1:
			var err error
			key, err = f.str()
			return err
		case 2:
			m, err := f.msg()
			if err != nil {
				return err
			}
			return walk(m, func(f field) error { // PortList
				if f.num != 1 {
					return nil
				}
				m, err := f.msg()
				if err != nil {
					return err
				}
				p, err := unmarshalPort(m)
				ports = append(ports, p)
				return err
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("services: %w", err)
	}
	if w.Services == nil {
		w.Services = map[string][]xdsPort{}
	}
	w.Services[key] = ports
	return nil
}

func unmarshalPort(b []byte) (xdsPort, error) {
	var p xdsPort
	err := walk(b, func(f field) error {
		var v uint64
		var err error
		switch f.num {
		case 1:
			v, err = f.uint()
			p.ServicePort = uint32(v)
		case 2:
			v, err = f.uint()
			p.TargetPort = uint32(v)
		default:
			return nil
		}
		if err == nil && v > 65535 {
			err = fmt.Errorf("port %d out of range", v)
		}
		return err
	})
	return p, err
}

func unmarshalService(b []byte) (*xdsService, error) {
	s := &xdsService{}
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case svcName:
			s.Name, err = f.str()
		case svcNamespace:
			s.Namespace, err = f.str()
		case svcHostname:
			s.Hostname, err = f.str()
		case svcAddresses:
			var m []byte
			if m, err = f.msg(); err == nil {
				var a networkAddress
				a, err = unmarshalNetworkAddress(m)
				s.Addresses = append(s.Addresses, a)
			}
		case svcPorts:
			var m []byte
			if m, err = f.msg(); err == nil {
				var p xdsPort
				p, err = unmarshalPort(m)
				s.Ports = append(s.Ports, p)
			}
		case svcSubjectAltName:
			var v string
			v, err = f.str()
			s.SubjectAltNames = append(s.SubjectAltNames, v)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("decoding Service: %w", err)
	}
	return s, nil
}

func unmarshalNetworkAddress(b []byte) (networkAddress, error) {
	var a networkAddress
	err := walk(b, func(f field) error {
		switch f.num {
		case 1:
			var err error
			a.Network, err = f.str()
			return err
		case 2:
			raw, err := f.msg()
			if err != nil {
				return err
			}
			ip, ok := netip.AddrFromSlice(raw)
			if !ok {
				return fmt.Errorf("address: %d bytes is neither IPv4 nor IPv6", len(raw))
			}
			a.Addr = ip.Unmap()
		}
		return nil
	})
	if err == nil && !a.Addr.IsValid() {
		err = errors.New("address: empty")
	}
	return a, err
}
