package proxy

import (
	"net/netip"
	"sync"
	"time"
)

// connLogSize bounds the recent-connections log: enough for a connectivity
// check's probes on a node, small enough to cost nothing.
const connLogSize = 512

// connRecord is one connection the proxy handled, as /debug/connections
// lists it. Outbound records are made when the connection is routed and
// completed with Error when it ends in failure; inbound ones when the
// connection is authorized (or refused).
type connRecord struct {
	Time time.Time `json:"time"`
	// Direction is the meshctl_hbone_connections_opened_total label:
	// outbound and inbound are HBONE, outbound_passthrough and
	// inbound_plaintext are not; outbound_refused was not carried.
	Direction string `json:"direction"`
	HBONE     bool   `json:"hbone"`
	// Pod is the served pod (namespace/name) and Identity its SPIFFE ID.
	Pod      string         `json:"pod"`
	Identity string         `json:"identity"`
	Src      netip.AddrPort `json:"src"`
	// Dst is the address the client asked for (a Service VIP, a pod);
	// Target where the proxy sent it (outbound only).
	Dst    netip.AddrPort `json:"dst"`
	Target netip.AddrPort `json:"target,omitzero"`
	// Gateway and Authority are set for a destination on another
	// network: the east-west gateway the tunnel went to and the service
	// (host:port) it asked for; the gateway picked the endpoint.
	Gateway   netip.AddrPort `json:"gateway,omitzero"`
	Authority string         `json:"authority,omitempty"`
	// Peer is the other side's SPIFFE ID: outbound, the identity the
	// server had to prove (empty when any mesh identity was accepted;
	// through a gateway, the identities any of which it could prove);
	// inbound HBONE, the client's certificate.
	Peer  string `json:"peer,omitempty"`
	Error string `json:"error,omitempty"`
}

// Directions of a connRecord beyond the HBONE metric's.
const directionOutboundRefused = "outbound_refused"

// connLog is a ring of the most recent connections; the zero value is
// ready to use.
type connLog struct {
	mu   sync.Mutex
	ring []*connRecord
	next int
}

// add records r and returns a function that marks it failed with err (nil:
// no failure), for a connection whose outcome is known only later.
func (l *connLog) add(r connRecord) (fail func(error)) {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	rec := &r
	l.mu.Lock()
	if len(l.ring) < connLogSize {
		l.ring = append(l.ring, rec)
	} else {
		l.ring[l.next] = rec
	}
	l.next = (l.next + 1) % connLogSize
	l.mu.Unlock()
	return func(err error) {
		if err == nil {
			return
		}
		l.mu.Lock()
		rec.Error = err.Error()
		l.mu.Unlock()
	}
}

// records returns the log, oldest first.
func (l *connLog) records() []connRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]connRecord, 0, len(l.ring))
	start := 0
	if len(l.ring) == connLogSize {
		start = l.next
	}
	for i := range l.ring {
		out = append(out, *l.ring[(start+i)%len(l.ring)])
	}
	return out
}

// Connections returns the most recent connections the proxy handled,
// oldest first (at most 512).
func (p *Proxy) Connections() []connRecord { return p.conns.records() }
