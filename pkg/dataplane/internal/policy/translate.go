package policy

import (
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"

	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// DryRunAnnotation marks a policy to be evaluated and logged, not enforced.
const DryRunAnnotation = "istio.io/dry-run"

type selectorSpec struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type authzSpec struct {
	Selector   *selectorSpec     `json:"selector"`
	TargetRef  json.RawMessage   `json:"targetRef"`
	TargetRefs []json.RawMessage `json:"targetRefs"`
	Action     string            `json:"action"`
	Rules      []json.RawMessage `json:"rules"`
}

type ruleSpec struct {
	From []struct {
		Source *sourceSpec `json:"source"`
	} `json:"from"`
	To []struct {
		Operation *operationSpec `json:"operation"`
	} `json:"to"`
	When []struct {
		Key       string   `json:"key"`
		Values    []string `json:"values"`
		NotValues []string `json:"notValues"`
	} `json:"when"`
}

type sourceSpec struct {
	Principals           []string `json:"principals"`
	NotPrincipals        []string `json:"notPrincipals"`
	RequestPrincipals    []string `json:"requestPrincipals"`
	NotRequestPrincipals []string `json:"notRequestPrincipals"`
	Namespaces           []string `json:"namespaces"`
	NotNamespaces        []string `json:"notNamespaces"`
	ServiceAccounts      []string `json:"serviceAccounts"`
	NotServiceAccounts   []string `json:"notServiceAccounts"`
	IPBlocks             []string `json:"ipBlocks"`
	NotIPBlocks          []string `json:"notIpBlocks"`
	RemoteIPBlocks       []string `json:"remoteIpBlocks"`
	NotRemoteIPBlocks    []string `json:"notRemoteIpBlocks"`
}

type operationSpec struct {
	Hosts      []string `json:"hosts"`
	NotHosts   []string `json:"notHosts"`
	Ports      []string `json:"ports"`
	NotPorts   []string `json:"notPorts"`
	Methods    []string `json:"methods"`
	NotMethods []string `json:"notMethods"`
	Paths      []string `json:"paths"`
	NotPaths   []string `json:"notPaths"`
}

// l4When are the when keys ztunnel can evaluate.
var l4When = map[string]bool{
	"source.ip": true, "source.namespace": true, "source.principal": true,
	"destination.ip": true, "destination.port": true,
}

// AuthorizationFromUnstructured translates an AuthorizationPolicy as
// istiod does for ztunnel. A nil policy without error means ztunnel would
// not enforce it (AUDIT, CUSTOM, targetRef); warnings say what was dropped
// or made fail-safe. The error is for an object that names no policy.
func AuthorizationFromUnstructured(u *unstructured.Unstructured, rootNS string) (*Authorization, []string, error) {
	if rootNS == "" {
		rootNS = ambient.DefaultRootNamespace
	}
	ns, name := u.GetNamespace(), u.GetName()
	if ns == "" || name == "" {
		return nil, nil, fmt.Errorf("AuthorizationPolicy %q: namespace and name are required", ns+"/"+name)
	}
	key := ns + "/" + name
	var warn []string
	a := &Authorization{Name: name, Namespace: ns, Scope: ScopeNamespace, Rules: [][][]Match{}}
	if v := u.GetAnnotations()[DryRunAnnotation]; v != "" {
		dry, err := strconv.ParseBool(v)
		if err != nil {
			// istiod logs this and enforces the policy.
			warn = append(warn, fmt.Sprintf("annotation %s: %q is not a boolean; enforcing", DryRunAnnotation, v))
		}
		a.DryRun = dry
	}
	// Fields are read one by one so that a broken one fails only as far as
	// it must: see denyAll.
	var fields map[string]json.RawMessage
	var spec authzSpec
	denyAll := func(field string, err error) (*Authorization, []string, error) {
		// What the policy selects or does is unknown: deny every
		// connection to the widest set it could apply to, its namespace
		// (every workload, from the root namespace).
		a.Action, a.Rules, a.Scope, a.Selector = Deny, [][][]Match{{}}, ScopeNamespace, nil
		if ns == rootNS {
			a.Scope = ScopeGlobal
		}
		return a, append(warn, fmt.Sprintf("AuthorizationPolicy %s: %s: %v; denying every connection to its namespace", key, field, err)), nil
	}
	if err := decode(u.Object["spec"], &fields); err != nil {
		return denyAll("spec", err)
	}
	for _, f := range []struct {
		name string
		v    any
	}{{"targetRef", &spec.TargetRef}, {"targetRefs", &spec.TargetRefs}, {"selector", &spec.Selector}, {"action", &spec.Action}} {
		if err := decode(fields[f.name], f.v); err != nil {
			return denyAll("spec."+f.name, err)
		}
	}
	rulesErr := decode(fields["rules"], &spec.Rules)
	if len(spec.TargetRef) > 0 || len(spec.TargetRefs) > 0 {
		return nil, append(warn, fmt.Sprintf("AuthorizationPolicy %s: targetRef binds it to a waypoint; not enforced by the node proxy", key)), nil
	}
	if spec.Selector != nil {
		a.Scope, a.Selector = ScopeWorkloadSelector, spec.Selector.MatchLabels
		if a.Selector == nil {
			a.Selector = map[string]string{}
		}
	} else if ns == rootNS {
		a.Scope = ScopeGlobal
	}
	switch spec.Action {
	case "", "ALLOW":
		a.Action = Allow
	case "DENY":
		a.Action = Deny
	case "AUDIT":
		return nil, append(warn, fmt.Sprintf("AuthorizationPolicy %s: AUDIT is not supported at L4 (it never changes a decision); ignored", key)), nil
	case "CUSTOM":
		return nil, append(warn, fmt.Sprintf("AuthorizationPolicy %s: CUSTOM needs a waypoint; ignored by the node proxy, as by ztunnel", key)), nil
	default:
		a.Action, a.Rules = Deny, [][][]Match{{}}
		return a, append(warn, fmt.Sprintf("AuthorizationPolicy %s: spec.action: unknown action %q (want ALLOW, DENY, AUDIT or CUSTOM); denying every connection it selects", key, spec.Action)), nil
	}
	if rulesErr != nil {
		if a.Action == Deny {
			a.Rules = [][][]Match{{}}
			return a, append(warn, fmt.Sprintf("AuthorizationPolicy %s: spec.rules: %v; the DENY policy matches every connection", key, rulesErr)), nil
		}
		return a, append(warn, fmt.Sprintf("AuthorizationPolicy %s: spec.rules: %v; the ALLOW policy matches nothing", key, rulesErr)), nil
	}
	for i, raw := range spec.Rules {
		var r ruleSpec
		if err := decode(raw, &r); err != nil {
			if a.Action == Deny {
				a.Rules = append(a.Rules, [][]Match{})
				warn = append(warn, fmt.Sprintf("AuthorizationPolicy %s: spec.rules[%d]: %v; the DENY rule matches every connection", key, i, err))
			} else {
				warn = append(warn, fmt.Sprintf("AuthorizationPolicy %s: spec.rules[%d]: %v; the ALLOW rule matches nothing", key, i, err))
			}
			continue
		}
		clauses, http, bad := convertRule(r, ns)
		for _, b := range bad {
			warn = append(warn, fmt.Sprintf("AuthorizationPolicy %s: rules[%d]: %s", key, i, b))
		}
		if len(http) > 0 {
			if a.Action == Allow {
				warn = append(warn, fmt.Sprintf("AuthorizationPolicy %s: rules[%d] uses HTTP attributes (%s): a waypoint is needed for them; the ALLOW rule matches nothing", key, i, strings.Join(http, ", ")))
				continue
			}
			warn = append(warn, fmt.Sprintf("AuthorizationPolicy %s: rules[%d] uses HTTP attributes (%s): a waypoint is needed for them; the DENY rule is enforced without them", key, i, strings.Join(http, ", ")))
		}
		a.Rules = append(a.Rules, clauses)
	}
	return a, warn, nil
}

// convertRule is istiod's handleRule: a clause for to, one for from, one
// per when; http lists the HTTP attributes found, bad the dropped values.
func convertRule(r ruleSpec, ruleNS string) (clauses [][]Match, http, bad []string) {
	clauses = [][]Match{}
	addHTTP := func(name string, vals []string) {
		if len(vals) > 0 {
			http = append(http, name)
		}
	}
	if len(r.To) > 0 {
		var to []Match
		for _, t := range r.To {
			op := t.Operation
			if op == nil {
				op = &operationSpec{}
			}
			addHTTP("hosts", op.Hosts)
			addHTTP("notHosts", op.NotHosts)
			addHTTP("methods", op.Methods)
			addHTTP("notMethods", op.NotMethods)
			addHTTP("paths", op.Paths)
			addHTTP("notPaths", op.NotPaths)
			to = append(to, Match{DestinationPorts: ports(op.Ports, &bad), NotDestinationPorts: ports(op.NotPorts, &bad)})
		}
		clauses = append(clauses, to)
	}
	if len(r.From) > 0 {
		var from []Match
		for _, f := range r.From {
			s := f.Source
			if s == nil {
				s = &sourceSpec{}
			}
			addHTTP("remoteIpBlocks", s.RemoteIPBlocks)
			addHTTP("notRemoteIpBlocks", s.NotRemoteIPBlocks)
			addHTTP("requestPrincipals", s.RequestPrincipals)
			addHTTP("notRequestPrincipals", s.NotRequestPrincipals)
			from = append(from, Match{
				SourceIPs: prefixes(s.IPBlocks, &bad), NotSourceIPs: prefixes(s.NotIPBlocks, &bad),
				Namespaces: strMatches(s.Namespaces), NotNamespaces: strMatches(s.NotNamespaces),
				ServiceAccounts: saMatches(s.ServiceAccounts, ruleNS), NotServiceAccounts: saMatches(s.NotServiceAccounts, ruleNS),
				Principals: strMatches(s.Principals), NotPrincipals: strMatches(s.NotPrincipals),
			})
		}
		clauses = append(clauses, from)
	}
	for _, w := range r.When {
		if !l4When[w.Key] {
			http = append(http, w.Key)
		}
		var m Match
		switch w.Key {
		case "source.namespace":
			m.Namespaces, m.NotNamespaces = strMatches(w.Values), strMatches(w.NotValues)
		case "source.principal":
			m.Principals, m.NotPrincipals = strMatches(w.Values), strMatches(w.NotValues)
		case "source.ip":
			m.SourceIPs, m.NotSourceIPs = prefixes(w.Values, &bad), prefixes(w.NotValues, &bad)
		case "destination.ip":
			m.DestinationIPs, m.NotDestinationIPs = prefixes(w.Values, &bad), prefixes(w.NotValues, &bad)
		case "destination.port":
			m.DestinationPorts, m.NotDestinationPorts = ports(w.Values, &bad), ports(w.NotValues, &bad)
		}
		clauses = append(clauses, []Match{m})
	}
	return clauses, http, bad
}

func strMatches(vs []string) []StringMatch {
	var out []StringMatch
	for _, v := range vs {
		out = append(out, ParseStringMatch(v))
	}
	return out
}

func saMatches(vs []string, ruleNS string) []ServiceAccountMatch {
	var out []ServiceAccountMatch
	for _, v := range vs {
		if ns, sa, ok := strings.Cut(v, "/"); ok {
			out = append(out, ServiceAccountMatch{Namespace: ns, ServiceAccount: sa})
		} else {
			out = append(out, ServiceAccountMatch{Namespace: ruleNS, ServiceAccount: v})
		}
	}
	return out
}

// ports keeps the values that are port numbers, as istiod does.
func ports(vs []string, bad *[]string) []uint16 {
	var out []uint16
	for _, v := range vs {
		p, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			*bad = append(*bad, fmt.Sprintf("port %q is not a number; dropped", v))
			continue
		}
		out = append(out, uint16(p))
	}
	return out
}

// prefixes keeps the values that are IPs or CIDRs, as istiod does.
func prefixes(vs []string, bad *[]string) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range vs {
		if v == "" {
			continue
		}
		var p netip.Prefix
		var err error
		if strings.Contains(v, "/") {
			p, err = netip.ParsePrefix(v)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(v); err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			*bad = append(*bad, fmt.Sprintf("address %q is not an IP or CIDR; dropped", v))
			continue
		}
		out = append(out, p)
	}
	return out
}

type peerAuthSpec struct {
	Selector *selectorSpec `json:"selector"`
	MTLS     *struct {
		Mode string `json:"mode"`
	} `json:"mtls"`
	PortLevelMTLS map[string]*struct {
		Mode string `json:"mode"`
	} `json:"portLevelMtls"`
}

// PeerAuthenticationFromUnstructured translates a PeerAuthentication. A
// mode that cannot be read is taken as STRICT: refusing plaintext is the
// safe reading of a security setting nobody can interpret.
func PeerAuthenticationFromUnstructured(u *unstructured.Unstructured) (*PeerAuthentication, []string, error) {
	ns, name := u.GetNamespace(), u.GetName()
	if ns == "" || name == "" {
		return nil, nil, fmt.Errorf("PeerAuthentication %q: namespace and name are required", ns+"/"+name)
	}
	key := ns + "/" + name
	p := &PeerAuthentication{Name: name, Namespace: ns, Created: u.GetCreationTimestamp().Time}
	var spec peerAuthSpec
	if err := decode(u.Object["spec"], &spec); err != nil {
		p.Mode = ModeStrict
		return p, []string{fmt.Sprintf("PeerAuthentication %s: spec: %v; taken as STRICT", key, err)}, nil
	}
	var warn []string
	if spec.Selector != nil {
		p.Selector = spec.Selector.MatchLabels
	}
	if spec.MTLS != nil {
		m, err := ParseMode(spec.MTLS.Mode)
		if err != nil {
			m = ModeStrict
			warn = append(warn, fmt.Sprintf("PeerAuthentication %s: mtls.mode: %v; taken as STRICT", key, err))
		}
		p.Mode = m
	}
	if len(spec.PortLevelMTLS) > 0 && len(p.Selector) == 0 {
		warn = append(warn, fmt.Sprintf("PeerAuthentication %s: portLevelMtls applies only with a workload selector; ignored", key))
	} else {
		for k, v := range spec.PortLevelMTLS {
			port, err := strconv.ParseUint(k, 10, 16)
			if err != nil || port == 0 {
				warn = append(warn, fmt.Sprintf("PeerAuthentication %s: portLevelMtls key %q is not a port; ignored", key, k))
				continue
			}
			mode := ModeUnset
			if v != nil {
				if mode, err = ParseMode(v.Mode); err != nil {
					mode = ModeStrict
					warn = append(warn, fmt.Sprintf("PeerAuthentication %s: portLevelMtls[%s].mode: %v; taken as STRICT", key, k, err))
				}
			}
			if mode == ModeUnset {
				continue // inherits, as if absent
			}
			if p.PortModes == nil {
				p.PortModes = map[uint32]Mode{}
			}
			p.PortModes[uint32(port)] = mode
		}
	}
	return p, warn, nil
}

// decode reads a JSON-shaped value (unstructured content or raw JSON) into v.
func decode(in any, v any) error {
	if in == nil {
		return nil
	}
	raw, ok := in.(json.RawMessage)
	if ok && len(raw) == 0 {
		return nil // an absent field
	}
	if !ok {
		var err error
		if raw, err = json.Marshal(in); err != nil {
			return err
		}
	}
	err := json.Unmarshal(raw, v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// Name the field: json's own message shows Go types.
		if te.Field == "" {
			return fmt.Errorf("want %s, got a JSON %s", jsonType(te.Type.Kind()), te.Value)
		}
		return fmt.Errorf("field %s: want %s, got a JSON %s", te.Field, jsonType(te.Type.Kind()), te.Value)
	}
	return err
}

func jsonType(k reflect.Kind) string {
	switch k {
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "an object"
	case reflect.Bool:
		return "a boolean"
	}
	return "a string"
}
