package meshca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
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

// issuer is a loaded or new CA certificate with its key.
type issuer struct {
	cert *x509.Certificate
	key  crypto.Signer
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

func (a *Authority) ensureRoot() (issuer, Files, error) {
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
			return issuer{}, f, err
		}
		f.Action, f.Reason = Renewed, err.Error()
	default:
		f.Action, f.NotAfter = Reused, cur.cert.NotAfter
		return cur, f, nil
	}
	now := a.now()
	root, err := newCA(&x509.Certificate{
		Subject:   pkix.Name{Organization: []string{"meshctl"}, CommonName: "meshctl root CA (" + a.name + ")"},
		NotBefore: now.Add(-backdate),
		NotAfter:  now.Add(a.rootLife),
		KeyUsage:  x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}, issuer{})
	if err != nil {
		return issuer{}, f, fmt.Errorf("creating the root CA: %w", err)
	}
	// The key first: a crash between the two leaves a certificate that does
	// not match its key, which the next run renews.
	if err := writeKey(f.Files[RootKeyFile], root.key); err != nil {
		return issuer{}, f, err
	}
	if err := fsutil.WriteFile(f.Files[RootCertFile], encodeCerts(root.cert), 0o644); err != nil {
		return issuer{}, f, err
	}
	f.NotAfter = root.cert.NotAfter
	return root, f, nil
}

func (a *Authority) ensureIntermediate(cluster string, root issuer, newRoot bool) (Files, error) {
	dir := filepath.Join(a.dir, cluster)
	f := Files{Cluster: cluster, Dir: dir, Files: map[string]string{}}
	for _, name := range []string{CACertFile, CAKeyFile, RootCertFile, CertChainFile} {
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
		f.Action, f.NotAfter = Reused, cur.cert.NotAfter
		return f, nil
	}
	now := a.now()
	notAfter := now.Add(a.interLife)
	if notAfter.After(root.cert.NotAfter) {
		notAfter = root.cert.NotAfter
	}
	inter, err := newCA(&x509.Certificate{
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
	rootPEM := encodeCerts(root.cert)
	if err := writeKey(f.Files[CAKeyFile], inter.key); err != nil {
		return f, err
	}
	for _, w := range []struct {
		name string
		data []byte
	}{
		{CACertFile, encodeCerts(inter.cert)},
		{RootCertFile, rootPEM},
		{CertChainFile, encodeCerts(inter.cert, root.cert)},
	} {
		if err := fsutil.WriteFile(f.Files[w.name], w.data, 0o644); err != nil {
			return f, err
		}
	}
	f.NotAfter = inter.cert.NotAfter
	return f, nil
}

// newCA creates a P-256 key and a CA certificate for it from tmpl, signed by
// parent, or self-signed when parent has no certificate.
func newCA(tmpl *x509.Certificate, parent issuer) (issuer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return issuer{}, fmt.Errorf("generating key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return issuer{}, fmt.Errorf("generating serial: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	signer, signerKey := tmpl, crypto.Signer(key)
	if parent.cert != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, key.Public(), signerKey)
	if err != nil {
		return issuer{}, fmt.Errorf("signing: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return issuer{}, fmt.Errorf("parsing what was signed: %w", err)
	}
	return issuer{cert: cert, key: key}, nil
}

func encodeCerts(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}
