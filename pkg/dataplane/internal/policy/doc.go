// Package policy evaluates Istio's security.istio.io/v1 AuthorizationPolicy
// and PeerAuthentication at L4, with the semantics ztunnel gives them in
// ambient mode (istiod's conversion in pilot/pkg/serviceregistry/ambient,
// ztunnel's src/rbac.rs and ProxyState::assert_rbac).
//
// Evaluation (Snapshot.Check) of a connection to a workload:
//
//  1. the policies that apply are those in the root namespace without a
//     selector (every workload), those in the workload's namespace without a
//     selector, and those in the root namespace or the workload's namespace
//     whose selector.matchLabels are a subset of the workload's labels;
//  2. a DENY policy that matches denies (a STRICT PeerAuthentication is a
//     DENY of connections without a peer identity, as istiod's
//     istio_converted_static_strict policy);
//  3. no ALLOW policy applies: allow;
//  4. an ALLOW policy matches: allow; otherwise deny.
//
// A policy matches when any of its rules does; a rule matches when every
// clause (its to, its from, each when) does; a clause when any of its entries
// does; an entry when each field present in it does, a positive list by any
// value and a negative list by none. `rules: [{}]` therefore matches every
// connection and a policy with no rules matches none.
//
// What istiod does not send to ztunnel is not enforced: AUDIT (it never
// changes a decision) and CUSTOM (ext-authz needs a waypoint) are ignored
// with a warning, as are policies with targetRef(s), which bind to waypoints.
// A policy with the istio.io/dry-run annotation is evaluated and logged but
// never decides.
//
// HTTP attributes (methods, paths, hosts, requestPrincipals,
// remoteIpBlocks, when keys other than source.ip, source.namespace,
// source.principal, destination.ip and destination.port) cannot be seen at
// L4. As istiod does for ztunnel: in an ALLOW policy a rule that uses any of
// them is dropped (it matches nothing); in a DENY policy the HTTP fields are
// dropped and the rest of the rule is kept — and, exactly as in ztunnel, a
// clause left with nothing in it (a `to` of only methods, a `when` on a
// request header) then matches nothing. Values that do not parse (a port
// name such as "http", an address that is not an IP or CIDR) are dropped
// with a warning, as istiod drops them.
//
// Objects whose structure is wrong (a field of the wrong type, an unknown
// action), which Istio's CRD schema and webhook would have refused, fail
// safe: an ALLOW rule that cannot be read matches nothing; a DENY rule that
// cannot be read, or a policy whose action cannot be read, denies every
// connection to the workloads it selects.
//
// PeerAuthentication: the effective mode of a workload's port is the
// portLevelMtls entry of the oldest selector policy in its namespace that
// selects it, else that policy's mode, else the oldest namespace-wide policy's
// mode, else the oldest root-namespace policy's mode; UNSET inherits and no
// policy at all is PERMISSIVE. STRICT refuses connections without a peer
// identity (plaintext on 15006); PERMISSIVE and DISABLE accept both, as in
// ambient (ztunnel never forces plaintext). istiod's conversion has two
// corners this does not copy: a port-level DISABLE under an inherited STRICT
// stays STRICT there, and a port-level STRICT on a PERMISSIVE workload is
// lost under a mesh-wide STRICT.
package policy
