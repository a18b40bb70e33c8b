package xds

import (
	"fmt"
	"net/netip"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
)

// unmarshalAuthorization decodes istio.security.Authorization into the
// policy package's form, as ztunnel's rbac.rs converts it. A policy of
// scope WORKLOAD_SELECTOR comes without its selector: istiod names it in
// the workloads it selects (Workload.authorization_policies), so its
// Selector stays nil.
func unmarshalAuthorization(b []byte) (*policy.Authorization, error) {
	a := &policy.Authorization{Rules: [][][]policy.Match{}}
	err := walk(b, func(f field) error {
		var err error
		var v uint64
		switch f.num {
		case 1:
			a.Name, err = f.str()
		case 2:
			a.Namespace, err = f.str()
		case 3:
			if v, err = f.uint(); err == nil {
				switch v {
				case 0:
					a.Scope = policy.ScopeGlobal
				case 1:
					a.Scope = policy.ScopeNamespace
				case 2:
					a.Scope = policy.ScopeWorkloadSelector
				default:
					err = fmt.Errorf("unknown scope %d", v)
				}
			}
		case 4:
			if v, err = f.uint(); err == nil {
				switch v {
				case 0:
					a.Action = policy.Allow
				case 1:
					a.Action = policy.Deny
				default:
					err = fmt.Errorf("unknown action %d", v)
				}
			}
		case 5:
			var m []byte
			if m, err = f.msg(); err == nil {
				var r [][]policy.Match
				r, err = unmarshalRule(m)
				a.Rules = append(a.Rules, r)
			}
		case 6:
			v, err = f.uint()
			a.DryRun = v != 0
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("decoding Authorization: %w", err)
	}
	return a, nil
}

func unmarshalRule(b []byte) ([][]policy.Match, error) {
	rule := [][]policy.Match{}
	err := walk(b, func(f field) error {
		if f.num != 1 { // clauses
			return nil
		}
		m, err := f.msg()
		if err != nil {
			return err
		}
		clause := []policy.Match{}
		err = walk(m, func(f field) error {
			if f.num != 2 { // matches
				return nil
			}
			m, err := f.msg()
			if err != nil {
				return err
			}
			match, err := unmarshalMatch(m)
			clause = append(clause, match)
			return err
		})
		rule = append(rule, clause)
		return err
	})
	return rule, err
}

func unmarshalMatch(b []byte) (policy.Match, error) {
	var m policy.Match
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			m.Namespaces, err = appendStringMatch(m.Namespaces, f)
		case 2:
			m.NotNamespaces, err = appendStringMatch(m.NotNamespaces, f)
		case 3:
			m.Principals, err = appendStringMatch(m.Principals, f)
		case 4:
			m.NotPrincipals, err = appendStringMatch(m.NotPrincipals, f)
		case 5:
			m.SourceIPs, err = appendPrefix(m.SourceIPs, f)
		case 6:
			m.NotSourceIPs, err = appendPrefix(m.NotSourceIPs, f)
		case 7:
			m.DestinationIPs, err = appendPrefix(m.DestinationIPs, f)
		case 8:
			m.NotDestinationIPs, err = appendPrefix(m.NotDestinationIPs, f)
		case 9:
			m.DestinationPorts, err = appendPorts(m.DestinationPorts, f)
		case 10:
			m.NotDestinationPorts, err = appendPorts(m.NotDestinationPorts, f)
		case 11:
			m.ServiceAccounts, err = appendServiceAccount(m.ServiceAccounts, f)
		case 12:
			m.NotServiceAccounts, err = appendServiceAccount(m.NotServiceAccounts, f)
		}
		return err
	})
	return m, err
}

// appendStringMatch decodes a StringMatch oneof; an unset one (no field)
// is dropped, as ztunnel drops it.
func appendStringMatch(to []policy.StringMatch, f field) ([]policy.StringMatch, error) {
	b, err := f.msg()
	if err != nil {
		return nil, err
	}
	var (
		sm  policy.StringMatch
		set bool
	)
	err = walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			sm.Kind = policy.Exact
			sm.Value, err = f.str()
		case 2:
			sm.Kind = policy.Prefix
			sm.Value, err = f.str()
		case 3:
			sm.Kind = policy.Suffix
			sm.Value, err = f.str()
		case 4:
			sm, err = policy.StringMatch{Kind: policy.Presence}, nil
			if f.typ != 2 {
				err = fmt.Errorf("presence: %w", errWireType)
			}
		default:
			return nil
		}
		set = true
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("string match: %w", err)
	}
	if !set {
		return to, nil
	}
	return append(to, sm), nil
}

// appendPrefix decodes istio.security.Address (address bytes, prefix
// length); an address that is not one is dropped, as ztunnel drops it.
func appendPrefix(to []netip.Prefix, f field) ([]netip.Prefix, error) {
	b, err := f.msg()
	if err != nil {
		return nil, err
	}
	var (
		raw    []byte
		length uint64
	)
	err = walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			raw, err = f.msg()
		case 2:
			length, err = f.uint()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("address: %w", err)
	}
	ip, ok := netip.AddrFromSlice(raw)
	if !ok {
		return to, nil
	}
	ip = ip.Unmap()
	if length > uint64(ip.BitLen()) {
		return to, nil
	}
	p, err := ip.Prefix(int(length))
	if err != nil {
		return to, nil
	}
	return append(to, p), nil
}

// appendPorts decodes ports. ztunnel truncates a port above 65535 to 16
// bits (a policy on another port than written); it is refused here, so the
// NACK shows istiod's mistake and the policy's previous version stays.
func appendPorts(to []uint16, f field) ([]uint16, error) {
	ports, err := f.uint32s(nil)
	if err != nil {
		return nil, err
	}
	for _, p := range ports {
		if p > 65535 {
			return nil, fmt.Errorf("port %d out of range", p)
		}
		to = append(to, uint16(p))
	}
	return to, nil
}

func appendServiceAccount(to []policy.ServiceAccountMatch, f field) ([]policy.ServiceAccountMatch, error) {
	b, err := f.msg()
	if err != nil {
		return nil, err
	}
	var sa policy.ServiceAccountMatch
	err = walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			sa.Namespace, err = f.str()
		case 2:
			sa.ServiceAccount, err = f.str()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("service account match: %w", err)
	}
	return append(to, sa), nil
}
