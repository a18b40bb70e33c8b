package proxy

import "time"

// Reconnect waits to the node agent, as ztunnel's: the first retry comes
// almost at once (istio-cni restarting is routine and the socket comes back
// within seconds), doubling to a cap. A session that got a whole snapshot
// resets it, so a restart after hours of service is not met with the wait
// an earlier outage grew to.
const (
	reconnectInitial = 20 * time.Millisecond
	reconnectMax     = 15 * time.Second
)

// reconnectBackoff is the wait before the next session; the zero value is
// ready to use.
type reconnectBackoff struct{ cur time.Duration }

func (b *reconnectBackoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = reconnectInitial
		return b.cur
	}
	b.cur = min(2*b.cur, reconnectMax)
	return b.cur
}

func (b *reconnectBackoff) reset() { b.cur = 0 }
