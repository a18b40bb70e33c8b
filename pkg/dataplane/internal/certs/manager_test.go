package certs

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/meshca"
)

var id = identity.New("cluster.local", "ns", "sa")

// scripted is a Fetcher whose answers the test decides, recording the (fake)
// time of every call.
type scripted struct {
	clock *testclock.FakeClock
	ca    *meshca.CA
	mu    sync.Mutex
	fail  bool
	calls chan time.Time
	pods  []Pod
}

func (s *scripted) Fetch(_ context.Context, req Request) ([]byte, []byte, error) {
	now := s.clock.Now()
	s.mu.Lock()
	fail := s.fail
	s.pods = append(s.pods, req.Pod)
	s.mu.Unlock()
	defer func() { s.calls <- now }()
	if fail {
		return nil, nil, errors.New("CA is down")
	}
	chain, err := s.ca.SignCSR(req.CSR, req.Identity.URL(), now, now.Add(2*time.Hour))
	if err != nil {
		return nil, nil, err
	}
	return meshca.EncodeCertificates(chain), s.ca.RootsPEM(), nil
}

func (s *scripted) setFail(f bool) { s.mu.Lock(); s.fail = f; s.mu.Unlock() }

// expectFetchAfter steps the fake clock to just before d and checks nothing
// happens, then to d and checks a fetch happens exactly then.
func expectFetchAfter(t *testing.T, s *scripted, d time.Duration) {
	t.Helper()
	waitWaiter(t, s.clock)
	s.clock.Step(d - time.Millisecond)
	select {
	case at := <-s.calls:
		t.Fatalf("fetch at %v, earlier than the expected delay %v", at, d)
	case <-time.After(30 * time.Millisecond):
	}
	want := s.clock.Now().Add(time.Millisecond)
	s.clock.Step(time.Millisecond)
	select {
	case at := <-s.calls:
		if !at.Equal(want) {
			t.Fatalf("fetch at %v, want %v", at, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no fetch after %v", d)
	}
}

func waitWaiter(t *testing.T, c *testclock.FakeClock) {
	t.Helper()
	for i := 0; i < 500 && !c.HasWaiters(); i++ {
		time.Sleep(2 * time.Millisecond)
	}
	if !c.HasWaiters() {
		t.Fatal("manager is not waiting on the clock")
	}
}

func TestRefreshBackoffAndKeepOldCertificate(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("certs")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	fc := testclock.NewFakeClock(t0)
	s := &scripted{clock: fc, ca: c, fail: true, calls: make(chan time.Time, 16)}
	m := New(s, withClock(fc))
	defer m.Close()
	m.Track(id, Pod{Namespace: "ns", Name: "p1", UID: "u1"})

	if at := <-s.calls; !at.Equal(t0) {
		t.Fatalf("first fetch at %v, want immediately", at)
	}
	waitWaiter(t, fc)
	if st := m.Dump()[0].State; !strings.HasPrefix(st, "Unavailable: ") || !strings.Contains(st, "CA is down") {
		t.Errorf("state after a failed first fetch = %q", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if _, err := m.Certificate(ctx, id); !errors.Is(err, errUnavailable) {
		t.Errorf("Certificate before any success: %v", err)
	}
	cancel()
	// Backoff 500 ms doubling, capped at 150 s.
	for _, d := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, 64 * time.Second, 128 * time.Second, 150 * time.Second, 150 * time.Second} {
		expectFetchAfter(t, s, d)
	}
	// Success: the certificate is available and refresh is due at half life.
	s.setFail(false)
	expectFetchAfter(t, s, 150*time.Second)
	cert, err := m.Certificate(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st := m.Dump()[0].State; st != StateAvailable {
		t.Errorf("state = %q, want Available", st)
	}
	// The refresh fails: the old certificate is still served, still Available.
	s.setFail(true)
	// Certificate times have one-second resolution, so half life is counted
	// from the NotBefore actually issued.
	expectFetchAfter(t, s, cert.Leaf.NotBefore.Add(time.Hour).Sub(fc.Now()))
	again, err := m.Certificate(context.Background(), id)
	if err != nil || again != cert {
		t.Fatalf("after a failed refresh got %v, %v; want the old certificate", again, err)
	}
	if st := m.Dump()[0].State; st != StateAvailable {
		t.Errorf("state with a valid old certificate = %q, want Available", st)
	}
	// Backoff starts again from 500 ms after a success.
	expectFetchAfter(t, s, 500*time.Millisecond)
	// Past expiry the old certificate is no longer served.
	waitWaiter(t, fc)
	fc.SetTime(cert.Leaf.NotAfter.Add(time.Second))
	<-s.calls
	if _, err := m.Certificate(context.Background(), id); !errors.Is(err, errUnavailable) {
		t.Errorf("expired certificate served: %v", err)
	}
	if st := m.Dump()[0].State; !strings.HasPrefix(st, "Unavailable") {
		t.Errorf("state after expiry = %q", st)
	}
	if len(m.Dump()[0].CertChain) != 2 || len(m.Dump()[0].RootCerts) != 1 {
		t.Errorf("dump chain/roots = %d/%d, want 2/1", len(m.Dump()[0].CertChain), len(m.Dump()[0].RootCerts))
	}
	s.mu.Lock()
	if s.pods[0].Name != "p1" {
		t.Errorf("request named pod %+v, want p1", s.pods[0])
	}
	s.mu.Unlock()
}

func TestUntrackDropsIdentity(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("certs")
	if err != nil {
		t.Fatal(err)
	}
	m := New(FromCA(c, time.Hour, time.Now))
	defer m.Close()
	m.Track(id, Pod{UID: "a"})
	m.Track(id, Pod{UID: "b"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cert, err := m.Certificate(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Verify(cert.Certificate, m.Roots(), "cluster.local", id, time.Now()); err != nil {
		t.Fatalf("issued certificate does not verify against learned roots: %v", err)
	}
	m.Untrack(id, "a")
	if _, err := m.Certificate(ctx, id); err != nil {
		t.Fatalf("identity dropped while a pod still uses it: %v", err)
	}
	m.Untrack(id, "b")
	if _, err := m.Certificate(ctx, id); !errors.Is(err, errUnavailable) {
		t.Fatalf("identity kept after its last pod left: %v", err)
	}
	if len(m.Dump()) != 0 {
		t.Errorf("dump still lists %d certificates", len(m.Dump()))
	}
}

// TestWrongIdentityIsUnavailable: a CA that signs for another identity than
// requested (an istiod ignoring the impersonation) leaves the certificate
// Unavailable, with a reason naming both identities.
func TestWrongIdentityIsUnavailable(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("certs")
	if err != nil {
		t.Fatal(err)
	}
	other := identity.New("cluster.local", "istio-system", "proxy")
	m := New(fetcherFunc(func(_ context.Context, req Request) ([]byte, []byte, error) {
		block, _ := pem.Decode(req.CSR)
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			return nil, nil, err
		}
		chain, err := c.Sign(csr.PublicKey, other.URL(), time.Now(), time.Now().Add(time.Hour))
		if err != nil {
			return nil, nil, err
		}
		return meshca.EncodeCertificates(chain), c.RootsPEM(), nil
	}), WithBackoff(time.Hour, time.Hour))
	defer m.Close()
	m.Track(id, Pod{UID: "u"})
	var st string
	for range 1000 {
		if st = m.Dump()[0].State; st != StateInitializing {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := "Unavailable: issued certificate is for spiffe://cluster.local/ns/istio-system/sa/proxy, want spiffe://cluster.local/ns/ns/sa/sa"
	if st != want {
		t.Errorf("state = %q, want %q", st, want)
	}
}
