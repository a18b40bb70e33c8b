package meshca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"path/filepath"
	"time"

	"github.com/meshctl/meshctl/internal/fsutil"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// Lifetimes: long, because a test environment's root should outlive the
// environment, and an expired root breaks every cluster at once.
const (
	DefaultRootLifetime         = 10 * 365 * 24 * time.Hour
	DefaultIntermediateLifetime = 5 * 365 * 24 * time.Hour
)

// MinLifetime is the shortest lifetime a new root or intermediate may get.
// An intermediate longer than the root is cut short where the root expires,
// so it need not be refused.
const MinLifetime = time.Hour

// File names: Istio's cacerts keys, and the root's key, which stays on the
// host (clusters never need it).
const (
	CACertFile    = "ca-cert.pem"
	CAKeyFile     = "ca-key.pem"
	RootCertFile  = "root-cert.pem"
	CertChainFile = "cert-chain.pem"
	RootKeyFile   = "root-key.pem"
)

// Actions in a Result.
const (
	Created = "created" // no files were there
	Reused  = "reused"  // valid files were kept
	Renewed = "renewed" // files were there but not fit to keep: see Reason
	Rotated = "rotated" // WithRotate replaced valid files
)

// backdate allows for clocks behind the host's (kind nodes, CI runners).
const backdate = time.Hour

// Authority creates and reuses the CA files of one environment. Build it
// with New.
type Authority struct {
	dir       string
	name      string
	rootLife  time.Duration
	interLife time.Duration
	rotate    bool
	now       func() time.Time
	clients   *kubeclient.Factory
}

// Option configures an Authority.
type Option func(*Authority)

// WithName names the environment in the root's subject (default "meshctl").
func WithName(name string) Option { return func(a *Authority) { a.name = name } }

// WithClients shares a kube-client factory for Install (default: none).
func WithClients(f *kubeclient.Factory) Option { return func(a *Authority) { a.clients = f } }

// WithRotate replaces the root and every intermediate even when valid.
func WithRotate(rotate bool) Option { return func(a *Authority) { a.rotate = rotate } }

// WithRootLifetime sets the lifetime of a new root (default 10 years).
func WithRootLifetime(d time.Duration) Option { return func(a *Authority) { a.rootLife = d } }

// WithIntermediateLifetime sets the lifetime of a new intermediate (default
// 5 years); it is cut short where the root expires first.
func WithIntermediateLifetime(d time.Duration) Option {
	return func(a *Authority) { a.interLife = d }
}

// WithClock replaces time.Now; tests use it to age certificates.
func WithClock(now func() time.Time) Option { return func(a *Authority) { a.now = now } }

// Dir is where an environment's CA files live.
func Dir(artifacts, env string) string { return filepath.Join(artifacts, env, "ca") }

// New returns an Authority over dir. Nothing is read or written until Ensure.
func New(dir string, opts ...Option) *Authority {
	a := &Authority{dir: dir, name: "meshctl", rootLife: DefaultRootLifetime, interLife: DefaultIntermediateLifetime, now: time.Now}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Result is what Ensure did.
type Result struct {
	Dir      string  `json:"dir"`
	Root     Files   `json:"root"`
	Clusters []Files `json:"clusters"`
}

// Files are one CA's files: the root's, or a cluster's.
type Files struct {
	Cluster  string            `json:"cluster,omitempty"`
	Dir      string            `json:"dir"`
	Files    map[string]string `json:"files"`
	Action   string            `json:"action"`
	Reason   string            `json:"reason,omitempty"`
	NotAfter time.Time         `json:"notAfter"`
}

// Ensure makes the root and an intermediate for each cluster exist and be
// valid, reusing what is. A new root renews every intermediate, since they
// would no longer chain to it.
func (a *Authority) Ensure(clusters ...string) (*Result, error) {
	// A CA that expires during the run that made it (--root-lifetime 1ns)
	// breaks every cluster's workload certificates at once.
	if a.rootLife < MinLifetime || a.interLife < MinLifetime {
		return nil, fmt.Errorf("CA lifetimes must be positive and at least %s, got root %s, intermediate %s", MinLifetime, a.rootLife, a.interLife)
	}
	seen := map[string]bool{}
	for _, c := range clusters {
		if c == "" || c == "." || c == ".." || filepath.Base(c) != c || seen[c] {
			return nil, fmt.Errorf("cluster name %q cannot name a CA directory (empty, a path or a duplicate)", c)
		}
		seen[c] = true
	}
	if err := mkdir(a.dir); err != nil {
		return nil, err
	}
	root, rootFiles, err := a.ensureRoot()
	if err != nil {
		return nil, err
	}
	res := &Result{Dir: a.dir, Root: rootFiles}
	for _, c := range clusters {
		f, err := a.ensureIntermediate(c, root, rootFiles.Action != Reused)
		if err != nil {
			return nil, err
		}
		res.Clusters = append(res.Clusters, f)
	}
	return res, nil
}

func (a *Authority) ensureRoot() (*Issuer, Files, error) {
	f := Files{Dir: a.dir, Files: map[string]string{
		RootCertFile: filepath.Join(a.dir, RootCertFile),
		RootKeyFile:  filepath.Join(a.dir, RootKeyFile),
	}}
	cur, err := a.loadRoot()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.Action = Created
	case a.rotate:
		f.Action = Rotated
	case err != nil:
		var inv invalid
		if !errors.As(err, &inv) {
			return nil, f, err
		}
		f.Action, f.Reason = Renewed, err.Error()
	default:
		f.Action, f.NotAfter = Reused, cur.Cert.NotAfter
		return cur, f, nil
	}
	now := a.now()
	root, err := NewIssuer(&x509.Certificate{
		Subject:   pkix.Name{Organization: []string{"meshctl"}, CommonName: "meshctl root CA (" + a.name + ")"},
		NotBefore: now.Add(-backdate),
		NotAfter:  now.Add(a.rootLife),
		KeyUsage:  x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}, nil)
	if err != nil {
		return nil, f, fmt.Errorf("creating the root CA: %w", err)
	}
	// The key first: a crash between the two leaves a certificate that does
	// not match its key, which the next run renews.
	if err := writeKey(f.Files[RootKeyFile], root.Key); err != nil {
		return nil, f, err
	}
	if err := fsutil.WriteFile(f.Files[RootCertFile], EncodeCertificates([]*x509.Certificate{root.Cert}), 0o644); err != nil {
		return nil, f, err
	}
	f.NotAfter = root.Cert.NotAfter
	return root, f, nil
}

func (a *Authority) ensureIntermediate(cluster string, root *Issuer, newRoot bool) (Files, error) {
	dir := filepath.Join(a.dir, cluster)
	f := Files{Cluster: cluster, Dir: dir, Files: map[string]string{}}
	for _, name := range cacertsFiles {
		f.Files[name] = filepath.Join(dir, name)
	}
	if err := mkdir(dir); err != nil {
		return f, err
	}
	cur, err := a.loadIntermediate(dir, root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.Action = Created
	case a.rotate:
		f.Action = Rotated
	case newRoot:
		// Say why in plain words; the chain check would only say
		// "signed by unknown authority".
		f.Action, f.Reason = Renewed, "the root CA is new"
	case err != nil:
		var inv invalid
		if !errors.As(err, &inv) {
			return f, err
		}
		f.Action, f.Reason = Renewed, err.Error()
	default:
		f.Action, f.NotAfter = Reused, cur.Cert.NotAfter
		return f, nil
	}
	now := a.now()
	notAfter := now.Add(a.interLife)
	if notAfter.After(root.Cert.NotAfter) {
		notAfter = root.Cert.NotAfter
	}
	inter, err := NewIssuer(&x509.Certificate{
		// The cluster is named in the subject only: no name constraints,
		// so the intermediate can sign for any trust domain a test uses.
		Subject:        pkix.Name{Organization: []string{"meshctl"}, Locality: []string{cluster}, CommonName: cluster + " intermediate CA"},
		NotBefore:      now.Add(-backdate),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		MaxPathLen:     0,
		MaxPathLenZero: true,
	}, root)
	if err != nil {
		return f, fmt.Errorf("creating %s's intermediate CA: %w", cluster, err)
	}
	rootPEM := EncodeCertificates([]*x509.Certificate{root.Cert})
	if err := writeKey(f.Files[CAKeyFile], inter.Key); err != nil {
		return f, err
	}
	for _, w := range []struct {
		name string
		data []byte
	}{
		{CACertFile, EncodeCertificates([]*x509.Certificate{inter.Cert})},
		{RootCertFile, rootPEM},
		{CertChainFile, EncodeCertificates([]*x509.Certificate{inter.Cert, root.Cert})},
	} {
		if err := fsutil.WriteFile(f.Files[w.name], w.data, 0o644); err != nil {
			return f, err
		}
	}
	f.NotAfter = inter.Cert.NotAfter
	return f, nil
}

// Issuer is a CA certificate and its key.
type Issuer struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewIssuer creates a P-256 key and a CA certificate for it from tmpl,
// signed by parent, or self-signed when parent is nil. It sets tmpl's serial
// number and marks it a CA; the rest (subject, validity, key usage, path
// length) is the caller's.
func NewIssuer(tmpl *x509.Certificate, parent *Issuer) (*Issuer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	signer, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signer, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, key.Public(), signerKey)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing what was signed: %w", err)
	}
	return &Issuer{Cert: cert, Key: key}, nil
}

// newSerial is a random 127-bit serial number, as RFC 5280 4.1.2.2 asks
// (positive, unpredictable, at most 20 octets).
func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial: %w", err)
	}
	return serial, nil
}
