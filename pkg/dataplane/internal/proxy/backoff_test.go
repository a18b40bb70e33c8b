package proxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/meshca"
)

func TestReconnectBackoffDoublesToCapAndResets(t *testing.T) {
	t.Parallel()
	var b reconnectBackoff
	want := reconnectInitial
	for range 12 {
		if got := b.next(); got != want {
			t.Fatalf("next = %s, want %s", got, want)
		}
		want = min(2*want, reconnectMax)
	}
	b.reset()
	if got := b.next(); got != reconnectInitial {
		t.Fatalf("after reset: %s, want %s", got, reconnectInitial)
	}
}

// flakyAgent fails every session at once, except that session syncAt
// delivers a whole snapshot first; it records when each session began.
type flakyAgent struct {
	syncAt int
	n      int
	starts chan time.Time
}

func (f *flakyAgent) Run(_ context.Context, handle func(WorkloadEvent) error) error {
	f.n++
	f.starts <- time.Now()
	if f.n == f.syncAt {
		if err := handle(WorkloadEvent{Kind: EventSnapshotSent}); err != nil {
			return err
		}
	}
	return errors.New("agent went away")
}

// After an outage has grown the wait, a session that synced (istio-cni was
// up) resets it: the next restart is met with a prompt redial, as ztunnel's.
func TestProxyRedialsPromptlyAfterASyncedSession(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("proxy")
	if err != nil {
		t.Fatal(err)
	}
	const syncAt = 7 // six failures first: the wait has grown to 640ms
	agent := &flakyAgent{syncAt: syncAt, starts: make(chan time.Time, 16)}
	p, err := New(WithWorkloadEvents(agent), WithFetcher(certs.FromCA(c, time.Hour, time.Now)), WithAddresses("", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var synced time.Time
	for i := 1; i <= syncAt+1; i++ {
		select {
		case at := <-agent.starts:
			if i == syncAt {
				synced = at
			}
			if i == syncAt+1 {
				if gap := at.Sub(synced); gap > 500*time.Millisecond {
					t.Errorf("redial %s after a synced session, want the initial %s", gap, reconnectInitial)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("session %d never started", i)
		}
	}
}
