package policy

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
)

// Conn is the connection being authorized.
type Conn struct {
	// Peer is the client's verified SPIFFE identity; zero for a plaintext
	// connection, which then matches no principal, namespace or service
	// account (and every notPrincipals).
	Peer identity.Identity
	Src  netip.Addr
	Dst  netip.AddrPort
}

// Workload is the destination workload, as far as policy selection goes.
type Workload struct {
	Namespace string
	Labels    map[string]string
	// Policies are the namespace/name of the workload-selector policies
	// istiod bound to the workload (Workload.authorization_policies): from
	// XDS, selector policies come without their selector and apply where
	// istiod names them, as in ztunnel.
	Policies []string
}

// Decision is the outcome of Check.
type Decision struct {
	Allowed bool
	// Reason: "denied" (a DENY policy matched), "not_allowed" (ALLOW
	// policies apply and none matched) or "strict" (no peer identity under
	// STRICT mTLS); empty when allowed.
	Reason string
	// Policy is namespace/name of the DENY policy that matched (for
	// "strict", the PeerAuthentication that made the port STRICT).
	Policy string
	// DryRun lists the dry-run policies that matched, for logging.
	DryRun []string
}

// Reasons of a Decision.
const (
	ReasonDenied     = "denied"
	ReasonNotAllowed = "not_allowed"
	ReasonStrict     = "strict"
)

// Snapshot is an immutable set of policies; Check is safe for concurrent use.
type Snapshot struct {
	rootNS    string
	global    []*Authorization            // root namespace, no selector
	byNS      map[string][]*Authorization // no selector
	selectors map[string][]*Authorization // with a selector, by namespace
	bound     map[string]*Authorization   // selector scope without a selector (XDS), by key
	peerAuths map[string][]*PeerAuthentication
}

// NewSnapshot indexes policies; rootNS "" is ambient.DefaultRootNamespace.
func NewSnapshot(rootNS string, authz []*Authorization, peerAuths []*PeerAuthentication) *Snapshot {
	if rootNS == "" {
		rootNS = ambient.DefaultRootNamespace
	}
	s := &Snapshot{rootNS: rootNS, byNS: map[string][]*Authorization{}, selectors: map[string][]*Authorization{},
		bound: map[string]*Authorization{}, peerAuths: map[string][]*PeerAuthentication{}}
	for _, a := range authz {
		switch {
		case a.Scope == ScopeWorkloadSelector && a.Selector == nil:
			s.bound[a.Key()] = a
		case a.Scope == ScopeWorkloadSelector:
			s.selectors[a.Namespace] = append(s.selectors[a.Namespace], a)
		case a.Namespace == rootNS:
			s.global = append(s.global, a)
		default:
			s.byNS[a.Namespace] = append(s.byNS[a.Namespace], a)
		}
	}
	for _, p := range peerAuths {
		s.peerAuths[p.Namespace] = append(s.peerAuths[p.Namespace], p)
	}
	return s
}

// RootNamespace is the namespace whose policies apply mesh-wide.
func (s *Snapshot) RootNamespace() string { return s.rootNS }

// Applicable returns the AuthorizationPolicies that apply to w.
func (s *Snapshot) Applicable(w Workload) []*Authorization {
	out := slices.Clone(s.global)
	if w.Namespace != s.rootNS {
		out = append(out, s.byNS[w.Namespace]...)
	}
	for _, ns := range []string{s.rootNS, w.Namespace} {
		for _, a := range s.selectors[ns] {
			if selects(a.Selector, w.Labels) {
				out = append(out, a)
			}
		}
		if ns == w.Namespace {
			break // the workload is in the root namespace: once is enough
		}
	}
	for _, k := range w.Policies {
		// A name istiod sent before the policy itself (or after removing
		// it) is skipped, as ztunnel does.
		if a, ok := s.bound[k]; ok {
			out = append(out, a)
		}
	}
	return out
}

func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// Check decides whether c may reach w, as ztunnel's assert_rbac does.
func (s *Snapshot) Check(c Conn, w Workload) Decision {
	var d Decision
	if c.Peer.IsZero() {
		if mode, pa := s.EffectiveMode(w, c.Dst.Port()); mode == ModeStrict {
			return Decision{Reason: ReasonStrict, Policy: pa}
		}
	}
	pols := s.Applicable(w)
	var allows int
	for _, a := range pols {
		if a.Action != Deny {
			if !a.DryRun {
				allows++
			}
			continue
		}
		if !a.matches(c) {
			continue
		}
		if a.DryRun {
			d.DryRun = append(d.DryRun, a.Key())
			continue
		}
		d.Reason, d.Policy = ReasonDenied, a.Key()
		if a.Name == StaticStrictPolicyName {
			// istiod's stand-in for STRICT (from XDS): the same reason as
			// the PeerAuthentication evaluated here.
			d.Reason = ReasonStrict
		}
		return d
	}
	for _, a := range pols {
		if a.Action == Allow && a.DryRun && a.matches(c) {
			d.DryRun = append(d.DryRun, a.Key())
		}
	}
	if allows == 0 {
		d.Allowed = true
		return d
	}
	for _, a := range pols {
		if a.Action == Allow && !a.DryRun && a.matches(c) {
			d.Allowed = true
			return d
		}
	}
	d.Reason = ReasonNotAllowed
	return d
}

func (a *Authorization) matches(c Conn) bool {
	for _, rule := range a.Rules {
		if ruleMatches(rule, c) {
			return true
		}
	}
	return false
}

func ruleMatches(rule [][]Match, c Conn) bool {
	for _, clause := range rule {
		if len(clause) == 0 {
			continue // an empty clause matches
		}
		ok := false
		for i := range clause {
			if !clause[i].empty() && clause[i].matches(c) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func (m *Match) matches(c Conn) bool {
	var principal, ns string
	if !c.Peer.IsZero() {
		principal = strings.TrimPrefix(c.Peer.String(), "spiffe://")
		ns = c.Peer.Namespace
	}
	strMatch := func(v string) func(StringMatch) bool {
		return func(s StringMatch) bool { return s.matches(v) }
	}
	// A principal is matched without spiffe://, and never without an identity.
	principalMatch := func(s StringMatch) bool { return principal != "" && s.matches(principal) }
	return both(m.DestinationIPs, m.NotDestinationIPs, func(p netip.Prefix) bool { return p.Contains(c.Dst.Addr()) }) &&
		both(m.SourceIPs, m.NotSourceIPs, func(p netip.Prefix) bool { return p.Contains(c.Src) }) &&
		both(m.DestinationPorts, m.NotDestinationPorts, func(p uint16) bool { return p == c.Dst.Port() }) &&
		both(m.ServiceAccounts, m.NotServiceAccounts, func(sa ServiceAccountMatch) bool {
			return !c.Peer.IsZero() && sa.Namespace == c.Peer.Namespace && sa.ServiceAccount == c.Peer.ServiceAccount
		}) &&
		both(m.Principals, m.NotPrincipals, principalMatch) &&
		both(m.Namespaces, m.NotNamespaces, strMatch(ns))
}

// both: any of pos (when there are any) and none of neg.
func both[T any](pos, neg []T, f func(T) bool) bool {
	if len(pos) > 0 && !slices.ContainsFunc(pos, f) {
		return false
	}
	return !slices.ContainsFunc(neg, f)
}

// EffectiveMode is w's mTLS mode on port, and the PeerAuthentication
// (namespace/name) that set it; ModePermissive and "" when none does.
func (s *Snapshot) EffectiveMode(w Workload, port uint16) (Mode, string) {
	mode, from := ModePermissive, ""
	set := func(p *PeerAuthentication, m Mode) {
		if p != nil && m != ModeUnset {
			mode, from = m, p.Key()
		}
	}
	var mesh, nsWide, sel *PeerAuthentication
	for _, p := range s.peerAuths[s.rootNS] {
		if len(p.Selector) == 0 {
			mesh = older(mesh, p)
		}
	}
	for _, p := range s.peerAuths[w.Namespace] {
		switch {
		case len(p.Selector) == 0:
			if w.Namespace != s.rootNS {
				nsWide = older(nsWide, p)
			}
		case w.Namespace != s.rootNS && selects(p.Selector, w.Labels):
			// Selector policies in the root namespace are not mesh-wide:
			// istiod ignores them for ambient.
			sel = older(sel, p)
		}
	}
	if mesh != nil {
		set(mesh, mesh.Mode)
	}
	if nsWide != nil {
		set(nsWide, nsWide.Mode)
	}
	if sel != nil {
		set(sel, sel.Mode)
		if pm, ok := sel.PortModes[uint32(port)]; ok {
			set(sel, pm)
		}
	}
	return mode, from
}

// older is the one of a and b created first (by name on a tie), as istiod
// picks among several policies at one level.
func older(a, b *PeerAuthentication) *PeerAuthentication {
	switch {
	case a == nil:
		return b
	case b.Created.Before(a.Created), b.Created.Equal(a.Created) && b.Key() < a.Key():
		return b
	}
	return a
}
