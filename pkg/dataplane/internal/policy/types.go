package policy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"
)

// StaticStrictPolicyName is the name istiod gives the DENY policy that
// stands for STRICT mTLS in ztunnel; denials by STRICT carry it.
const StaticStrictPolicyName = "istio_converted_static_strict"

// Action is what a matching policy does.
type Action int

const (
	Allow Action = iota
	Deny
)

func (a Action) String() string {
	if a == Deny {
		return "Deny"
	}
	return "Allow"
}

// MarshalJSON writes the action as ztunnel's config_dump does.
func (a Action) MarshalJSON() ([]byte, error) { return json.Marshal(a.String()) }

// Scope says which workloads a policy applies to.
type Scope int

const (
	// ScopeGlobal: the root namespace, no selector: every workload.
	ScopeGlobal Scope = iota
	// ScopeNamespace: no selector: the workloads of its namespace.
	ScopeNamespace
	// ScopeWorkloadSelector: the workloads its selector matches, in its
	// namespace or, from the root namespace, in any.
	ScopeWorkloadSelector
)

func (s Scope) String() string {
	switch s {
	case ScopeGlobal:
		return "Global"
	case ScopeNamespace:
		return "Namespace"
	}
	return "WorkloadSelector"
}

// MarshalJSON writes the scope as ztunnel's config_dump does.
func (s Scope) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// Authorization is one AuthorizationPolicy as ztunnel holds it. Rules is a
// list of rules (any matches), each a list of clauses (all match), each a
// list of matches (any matches).
type Authorization struct {
	Name      string      `json:"name"`
	Namespace string      `json:"namespace"`
	Scope     Scope       `json:"scope"`
	Action    Action      `json:"action"`
	Rules     [][][]Match `json:"rules"`
	DryRun    bool        `json:"dryRun"`
	// Selector is meshctl's addition to ztunnel's shape: ztunnel gets the
	// selection from istiod per workload, meshctl selects itself.
	Selector map[string]string `json:"selector,omitempty"`
}

// Key is namespace/name.
func (a *Authorization) Key() string { return a.Namespace + "/" + a.Name }

// Match is one entry of a clause: every field present must match.
type Match struct {
	Namespaces          []StringMatch         `json:"namespaces,omitempty"`
	NotNamespaces       []StringMatch         `json:"notNamespaces,omitempty"`
	ServiceAccounts     []ServiceAccountMatch `json:"serviceAccounts,omitempty"`
	NotServiceAccounts  []ServiceAccountMatch `json:"notServiceAccounts,omitempty"`
	Principals          []StringMatch         `json:"principals,omitempty"`
	NotPrincipals       []StringMatch         `json:"notPrincipals,omitempty"`
	SourceIPs           []netip.Prefix        `json:"sourceIps,omitempty"`
	NotSourceIPs        []netip.Prefix        `json:"notSourceIps,omitempty"`
	DestinationIPs      []netip.Prefix        `json:"destinationIps,omitempty"`
	NotDestinationIPs   []netip.Prefix        `json:"notDestinationIps,omitempty"`
	DestinationPorts    []uint16              `json:"destinationPorts,omitempty"`
	NotDestinationPorts []uint16              `json:"notDestinationPorts,omitempty"`
}

func (m *Match) empty() bool {
	return len(m.Namespaces)+len(m.NotNamespaces)+len(m.ServiceAccounts)+len(m.NotServiceAccounts)+
		len(m.Principals)+len(m.NotPrincipals)+len(m.SourceIPs)+len(m.NotSourceIPs)+
		len(m.DestinationIPs)+len(m.NotDestinationIPs)+len(m.DestinationPorts)+len(m.NotDestinationPorts) == 0
}

// StringMatchKind is how a StringMatch compares.
type StringMatchKind int

const (
	Exact StringMatchKind = iota
	Prefix
	Suffix
	Presence
)

// StringMatch is one value of principals or namespaces, after Istio's
// wildcard rules: "*" is presence, "*x" a suffix, "x*" a prefix.
type StringMatch struct {
	Kind  StringMatchKind
	Value string
}

// ParseStringMatch applies Istio's wildcard rules to v.
func ParseStringMatch(v string) StringMatch {
	switch {
	case v == "*":
		return StringMatch{Kind: Presence}
	case len(v) > 0 && v[0] == '*':
		return StringMatch{Kind: Suffix, Value: v[1:]}
	case len(v) > 0 && v[len(v)-1] == '*':
		return StringMatch{Kind: Prefix, Value: v[:len(v)-1]}
	}
	return StringMatch{Kind: Exact, Value: v}
}

func (s StringMatch) matches(v string) bool {
	switch s.Kind {
	case Prefix:
		return len(v) >= len(s.Value) && v[:len(s.Value)] == s.Value
	case Suffix:
		return len(v) >= len(s.Value) && v[len(v)-len(s.Value):] == s.Value
	case Presence:
		return v != ""
	}
	return v == s.Value
}

// MarshalJSON writes serde's externally tagged enum, as ztunnel does:
// {"Exact":"x"}, {"Prefix":"x"}, {"Suffix":"x"}, {"Presence":[]}.
func (s StringMatch) MarshalJSON() ([]byte, error) {
	switch s.Kind {
	case Prefix:
		return json.Marshal(map[string]string{"Prefix": s.Value})
	case Suffix:
		return json.Marshal(map[string]string{"Suffix": s.Value})
	case Presence:
		return []byte(`{"Presence":[]}`), nil
	}
	return json.Marshal(map[string]string{"Exact": s.Value})
}

func (s StringMatch) String() string {
	switch s.Kind {
	case Prefix:
		return s.Value + "*"
	case Suffix:
		return "*" + s.Value
	case Presence:
		return "*"
	}
	return s.Value
}

// ServiceAccountMatch is one value of source.serviceAccounts.
type ServiceAccountMatch struct {
	Namespace      string `json:"namespace"`
	ServiceAccount string `json:"serviceAccount"`
}

// Mode is a PeerAuthentication mTLS mode.
type Mode int

const (
	ModeUnset Mode = iota
	ModePermissive
	ModeStrict
	ModeDisable
)

func (m Mode) String() string {
	return [...]string{"UNSET", "PERMISSIVE", "STRICT", "DISABLE"}[m]
}

// ParseMode reads a PeerAuthentication mode; "" is UNSET.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "UNSET":
		return ModeUnset, nil
	case "PERMISSIVE":
		return ModePermissive, nil
	case "STRICT":
		return ModeStrict, nil
	case "DISABLE":
		return ModeDisable, nil
	}
	return ModeUnset, fmt.Errorf("unknown mTLS mode %q (want UNSET, PERMISSIVE, STRICT or DISABLE)", s)
}

// PeerAuthentication is one PeerAuthentication, as far as ambient uses it.
type PeerAuthentication struct {
	Name      string
	Namespace string
	// Selector nil or empty: namespace-wide (mesh-wide in the root namespace).
	Selector  map[string]string
	Mode      Mode
	PortModes map[uint32]Mode // portLevelMtls; only with a selector
	Created   time.Time       // the oldest of several at one level wins
}

// Key is namespace/name.
func (p *PeerAuthentication) Key() string { return p.Namespace + "/" + p.Name }
