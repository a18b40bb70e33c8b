package meshca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"time"
)

// CA signs workload certificates with an intermediate that chains to a root.
type CA struct {
	cert  *x509.Certificate
	key   crypto.Signer
	chain []*x509.Certificate // cert first, up to (excluding) the root
	roots []*x509.Certificate
}

// FromPEM loads a CA from Istio's cacerts files: ca-cert.pem, ca-key.pem,
// cert-chain.pem (intermediate up to the root, may be empty) and root-cert.pem.
func FromPEM(caCert, caKey, certChain, rootCert []byte) (*CA, error) {
	certs, err := ParseCertificates(caCert)
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("load ca-cert.pem: %w", errors.Join(err, errors.New("no certificate")))
	}
	block, _ := pem.Decode(caKey)
	if block == nil {
		return nil, errors.New("load ca-key.pem: no PEM block")
	}
	key, err := parseKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load ca-key.pem: %w", err)
	}
	chain, err := ParseCertificates(certChain)
	if err != nil {
		return nil, fmt.Errorf("load cert-chain.pem: %w", err)
	}
	roots, err := ParseCertificates(rootCert)
	if err != nil || len(roots) == 0 {
		return nil, fmt.Errorf("load root-cert.pem: %w", errors.Join(err, errors.New("no certificate")))
	}
	c := &CA{cert: certs[0], key: key, roots: roots}
	c.chain = append([]*x509.Certificate{certs[0]}, withoutRoots(chain, certs[0], roots)...)
	return c, nil
}

// withoutRoots drops the CA certificate itself and any root from cert-chain.pem,
// because peers must be sent intermediates only.
func withoutRoots(chain []*x509.Certificate, self *x509.Certificate, roots []*x509.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
next:
	for _, c := range chain {
		if c.Equal(self) {
			continue
		}
		for _, r := range roots {
			if c.Equal(r) {
				continue next
			}
		}
		out = append(out, c)
	}
	return out
}

// NewTest creates a fresh root and cluster intermediate, valid for a day from
// now. It exists for tests and benchmarks; a real mesh uses FromPEM.
func NewTest(name string) (*CA, error) {
	now := time.Now()
	root, err := NewIssuer(&x509.Certificate{
		Subject:   pkix.Name{Organization: []string{"meshctl"}, CommonName: name + " root"},
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(24 * time.Hour),
		KeyUsage:  x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("root: %w", err)
	}
	inter, err := NewIssuer(&x509.Certificate{
		Subject:   pkix.Name{Organization: []string{"meshctl"}, CommonName: name + " intermediate"},
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(24 * time.Hour),
		KeyUsage:  x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}, root)
	if err != nil {
		return nil, fmt.Errorf("intermediate: %w", err)
	}
	return &CA{cert: inter.Cert, key: inter.Key, chain: []*x509.Certificate{inter.Cert}, roots: []*x509.Certificate{root.Cert}}, nil
}

// Roots returns the mesh root certificates.
func (c *CA) Roots() []*x509.Certificate { return c.roots }

// RootPool returns the mesh roots as a pool for verification.
func (c *CA) RootPool() *x509.CertPool {
	p := x509.NewCertPool()
	for _, r := range c.roots {
		p.AddCert(r)
	}
	return p
}

// RootsPEM returns the mesh roots PEM-encoded.
func (c *CA) RootsPEM() []byte { return EncodeCertificates(c.roots) }

// Sign issues a workload certificate for pub with uri as its only SAN, valid
// from notBefore to notAfter (clipped to the intermediate's own validity, so a
// leaf never outlives its issuer). It returns the leaf followed by the
// intermediates, ready to be sent to peers.
func (c *CA) Sign(pub crypto.PublicKey, uri *url.URL, notBefore, notAfter time.Time) ([]*x509.Certificate, error) {
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		URIs:                  []*url.URL{uri},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, pub, c.key)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", uri, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", uri, err)
	}
	return append([]*x509.Certificate{leaf}, c.chain...), nil
}

// SignCSR issues a certificate for a PEM or DER certificate request after
// checking its signature; uri is the identity the caller has authorised, and
// the request must ask for exactly that and nothing else.
func (c *CA) SignCSR(csrPEM []byte, uri *url.URL, notBefore, notAfter time.Time) ([]*x509.Certificate, error) {
	der := csrPEM
	if b, _ := pem.Decode(csrPEM); b != nil {
		der = b.Bytes
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("parse CSR: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("CSR signature: %w", err)
	}
	if len(req.URIs) != 1 || req.URIs[0].String() != uri.String() || len(req.DNSNames) > 0 ||
		len(req.IPAddresses) > 0 || len(req.EmailAddresses) > 0 {
		return nil, fmt.Errorf("CSR asks for %v, want only %s", req.URIs, uri)
	}
	if k, ok := req.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		return nil, errors.New("CSR key is not ECDSA P-256")
	}
	return c.Sign(req.PublicKey, uri, notBefore, notAfter)
}

// Issue creates a key and a certificate for uri in one step; tests and
// benchmarks use it where no CSR round trip is wanted.
func (c *CA) Issue(uri *url.URL, notBefore, notAfter time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("key: %w", err)
	}
	chain, err := c.Sign(key.Public(), uri, notBefore, notAfter)
	if err != nil {
		return tls.Certificate{}, err
	}
	return TLSCertificate(chain, key), nil
}

// TLSCertificate assembles a tls.Certificate from a chain (leaf first) and key.
func TLSCertificate(chain []*x509.Certificate, key crypto.Signer) tls.Certificate {
	out := tls.Certificate{PrivateKey: key, Leaf: chain[0]}
	for _, c := range chain {
		out.Certificate = append(out.Certificate, c.Raw)
	}
	return out
}

// EncodeCertificates PEM-encodes certificates in order.
func EncodeCertificates(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// ParseCertificates decodes every CERTIFICATE block in PEM data.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out, nil
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		out = append(out, c)
	}
}
