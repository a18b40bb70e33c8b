package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// Pod names the pod an identity is requested for: the signer checks that the
// requesting proxy runs on that pod's node.
type Pod struct {
	Namespace, Name, UID string
}

// Request is one certificate request handed to a Fetcher.
type Request struct {
	Identity identity.Identity
	Pod      Pod
	CSR      []byte // PEM
}

// Fetcher turns a CSR into a PEM chain (leaf first) and the PEM mesh roots.
type Fetcher interface {
	Fetch(ctx context.Context, req Request) (chain, roots []byte, err error)
}

// fetcherFunc adapts a function to Fetcher.
type fetcherFunc func(ctx context.Context, req Request) (chain, roots []byte, err error)

// Fetch calls f.
func (f fetcherFunc) Fetch(ctx context.Context, req Request) ([]byte, []byte, error) {
	return f(ctx, req)
}

// States shown in /config_dump, as ztunnel names them.
const (
	StateInitializing = "Initializing"
	StateAvailable    = "Available"
	StateUnavailable  = "Unavailable"
)

// Manager fetches and refreshes the certificates of the identities it tracks.
type Manager struct {
	fetcher    Fetcher
	clock      clock.WithTicker
	log        *slog.Logger
	initial    time.Duration
	maxBackoff time.Duration

	mu      sync.Mutex
	entries map[identity.Identity]*entry
	roots   *x509.CertPool
	rootPEM []byte
}

type entry struct {
	pods    map[string]Pod // by UID
	cert    *tls.Certificate
	chain   []*x509.Certificate
	lastErr error
	ready   chan struct{} // closed once the first certificate arrives
	cancel  context.CancelFunc
}

// Option configures a Manager.
type Option func(*Manager)

// withClock sets the clock (a fake one in tests).
func withClock(c clock.WithTicker) Option { return func(m *Manager) { m.clock = c } }

// WithBackoff sets the first retry delay and its cap.
func WithBackoff(initial, max time.Duration) Option {
	return func(m *Manager) { m.initial, m.maxBackoff = initial, max }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// New returns a Manager that obtains certificates through f.
func New(f Fetcher, opts ...Option) *Manager {
	m := &Manager{
		fetcher: f, clock: clock.RealClock{}, log: slog.New(slog.DiscardHandler),
		initial: 500 * time.Millisecond, maxBackoff: 150 * time.Second,
		entries: map[identity.Identity]*entry{}, roots: x509.NewCertPool(),
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Track starts managing id's certificate on behalf of pod; it is idempotent
// per pod. The first pod of an identity starts the refresh loop.
func (m *Manager) Track(id identity.Identity, pod Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[id]
	if ok {
		e.pods[pod.UID] = pod
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	e = &entry{pods: map[string]Pod{pod.UID: pod}, ready: make(chan struct{}), cancel: cancel}
	m.entries[id] = e
	go m.refresh(ctx, id, e)
}

// Untrack stops managing id for pod; the last pod's departure drops the
// certificate, so a node never holds identities of pods it no longer runs.
func (m *Manager) Untrack(id identity.Identity, podUID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[id]
	if !ok {
		return
	}
	delete(e.pods, podUID)
	if len(e.pods) == 0 {
		e.cancel()
		delete(m.entries, id)
	}
}

// Close stops every refresh loop.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, e := range m.entries {
		e.cancel()
		delete(m.entries, id)
	}
}

// errUnavailable is returned when no valid certificate exists for an identity.
var errUnavailable = errors.New("certificate unavailable")

// Certificate returns id's current certificate, waiting for the first one
// until ctx ends. An expired certificate is never returned.
func (m *Manager) Certificate(ctx context.Context, id identity.Identity) (*tls.Certificate, error) {
	m.mu.Lock()
	e, ok := m.entries[id]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s is not tracked", errUnavailable, id)
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		m.mu.Lock()
		lastErr := e.lastErr
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %s: %w", errUnavailable, id, errors.Join(ctx.Err(), lastErr))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.cert == nil || !m.clock.Now().Before(e.cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("%w: %s: expired and not yet renewed: %w", errUnavailable, id, e.lastErr)
	}
	return e.cert, nil
}

// Roots returns the mesh roots learned from the CA.
func (m *Manager) Roots() *x509.CertPool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.roots
}

func (m *Manager) refresh(ctx context.Context, id identity.Identity, e *entry) {
	backoff := m.initial
	for {
		wait, err := m.fetchOnce(ctx, id, e)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m.log.Warn("certificate fetch failed", "identity", id.String(), "retry", backoff, "err", err)
			wait = backoff
			backoff = min(2*backoff, m.maxBackoff)
		} else {
			backoff = m.initial
		}
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(wait):
		}
	}
}

// fetchOnce obtains one certificate and returns how long to wait until the
// refresh: half of its lifetime, counted from NotBefore as Istio does.
func (m *Manager) fetchOnce(ctx context.Context, id identity.Identity, e *entry) (time.Duration, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return 0, m.fail(e, fmt.Errorf("generate key: %w", err))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*urlT{id.URL()}}, key)
	if err != nil {
		return 0, m.fail(e, fmt.Errorf("create CSR: %w", err))
	}
	m.mu.Lock()
	pod := anyPod(e.pods)
	m.mu.Unlock()
	chainPEM, rootsPEM, err := m.fetcher.Fetch(ctx, Request{
		Identity: id, Pod: pod,
		CSR: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
	})
	if err != nil {
		return 0, m.fail(e, err)
	}
	chain, err := meshca.ParseCertificates(chainPEM)
	if err != nil || len(chain) == 0 {
		return 0, m.fail(e, fmt.Errorf("issued chain: %w", errors.Join(err, errors.New("empty"))))
	}
	got, err := identity.FromCertificate(chain[0])
	if err != nil {
		return 0, m.fail(e, fmt.Errorf("issued certificate for %s: %w", id, err))
	}
	if got != id {
		return 0, m.fail(e, fmt.Errorf("issued certificate is for %s, want %s", got, id))
	}
	if !chain[0].PublicKey.(*ecdsa.PublicKey).Equal(key.Public()) {
		return 0, m.fail(e, errors.New("issued certificate does not match our key"))
	}
	roots, err := meshca.ParseCertificates(rootsPEM)
	if err != nil {
		return 0, m.fail(e, fmt.Errorf("roots: %w", err))
	}
	cert := meshca.TLSCertificate(chain, key)
	m.mu.Lock()
	defer m.mu.Unlock()
	e.cert, e.chain, e.lastErr = &cert, chain, nil
	if len(roots) > 0 {
		pool := x509.NewCertPool()
		for _, r := range roots {
			pool.AddCert(r)
		}
		m.roots, m.rootPEM = pool, rootsPEM
	}
	select {
	case <-e.ready:
	default:
		close(e.ready)
	}
	leaf := chain[0]
	half := leaf.NotAfter.Sub(leaf.NotBefore) / 2
	return max(leaf.NotBefore.Add(half).Sub(m.clock.Now()), 0), nil
}

func (m *Manager) fail(e *entry, err error) error {
	m.mu.Lock()
	e.lastErr = err
	m.mu.Unlock()
	return err
}

func anyPod(pods map[string]Pod) Pod {
	uids := make([]string, 0, len(pods))
	for uid := range pods {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	if len(uids) == 0 {
		return Pod{}
	}
	return pods[uids[0]]
}
