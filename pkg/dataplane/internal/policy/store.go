package policy

import (
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"

	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// Store holds the current policies; writers replace them one at a time and
// readers Check against an immutable Snapshot without locking.
type Store struct {
	rootNS string
	mu     sync.Mutex
	authz  map[string]*Authorization
	peer   map[string]*PeerAuthentication
	snap   atomic.Pointer[Snapshot]
}

// NewStore returns an empty Store; rootNS "" is ambient.DefaultRootNamespace.
func NewStore(rootNS string) *Store {
	if rootNS == "" {
		rootNS = ambient.DefaultRootNamespace
	}
	s := &Store{rootNS: rootNS, authz: map[string]*Authorization{}, peer: map[string]*PeerAuthentication{}}
	s.snap.Store(NewSnapshot(rootNS, nil, nil))
	return s
}

// RootNamespace is the store's root namespace.
func (s *Store) RootNamespace() string { return s.rootNS }

// Snapshot is the current set of policies.
func (s *Store) Snapshot() *Snapshot { return s.snap.Load() }

// Check decides c against the current policies.
func (s *Store) Check(c Conn, w Workload) Decision { return s.Snapshot().Check(c, w) }

// SetAuthorization replaces the policy namespace/name; nil removes it.
func (s *Store) SetAuthorization(key string, a *Authorization) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a == nil {
		delete(s.authz, key)
	} else {
		s.authz[key] = a
	}
	s.publish()
}

// SetPeerAuthentication replaces the PeerAuthentication namespace/name; nil removes it.
func (s *Store) SetPeerAuthentication(key string, p *PeerAuthentication) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == nil {
		delete(s.peer, key)
	} else {
		s.peer[key] = p
	}
	s.publish()
}

func (s *Store) publish() {
	s.snap.Store(NewSnapshot(s.rootNS, slices.Collect(maps.Values(s.authz)), slices.Collect(maps.Values(s.peer))))
}

// Dump lists the policies in ztunnel's config_dump shape, sorted by key.
// As istiod does, STRICT is shown as its static DENY policy once any
// PeerAuthentication exists.
func (s *Store) Dump() []*Authorization {
	s.mu.Lock()
	out := slices.Collect(maps.Values(s.authz))
	anyPeer := len(s.peer) > 0
	s.mu.Unlock()
	if anyPeer {
		out = append(out, StaticStrict(s.rootNS))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// StaticStrict is istiod's stand-in for STRICT mTLS in ztunnel: a DENY of
// every connection without a peer identity, attached to the workloads whose
// effective mode is STRICT.
func StaticStrict(rootNS string) *Authorization {
	return &Authorization{
		Name: StaticStrictPolicyName, Namespace: rootNS, Scope: ScopeWorkloadSelector, Action: Deny,
		Rules: [][][]Match{{{{NotPrincipals: []StringMatch{{Kind: Presence}}}}}},
	}
}

// LogDecision logs a denial (and dry-run matches) at the levels ztunnel uses.
func LogDecision(log *slog.Logger, d Decision, c Conn, w Workload) {
	args := []any{"src", c.Src, "peer", peerString(c), "dst", c.Dst, "namespace", w.Namespace}
	if len(d.DryRun) > 0 {
		log.Info("dry-run policies matched", append(args, "policies", d.DryRun)...)
	}
	if !d.Allowed {
		log.Info("connection denied by policy", append(args, "reason", d.Reason, "policy", d.Policy)...)
	}
}

func peerString(c Conn) string {
	if c.Peer.IsZero() {
		return ""
	}
	return c.Peer.String()
}
