package meshca

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// invalid marks files that exist but cannot be kept: they are renewed, not
// reported as a failure.
type invalid struct{ reason string }

func (e invalid) Error() string { return e.reason }

func invalidf(format string, args ...any) error { return invalid{fmt.Sprintf(format, args...)} }

func (a *Authority) loadRoot() (*Issuer, error) {
	certPEM, keyPEM, err := read2(filepath.Join(a.dir, RootCertFile), filepath.Join(a.dir, RootKeyFile))
	if err != nil {
		return nil, err
	}
	root, err := parseIssuer(certPEM, keyPEM, RootCertFile, RootKeyFile)
	if err != nil {
		return nil, err
	}
	if err := root.Cert.CheckSignatureFrom(root.Cert); err != nil {
		return nil, invalidf("%s is not a self-signed CA: %v", RootCertFile, err)
	}
	if err := a.checkTime(root.Cert, RootCertFile); err != nil {
		return nil, err
	}
	return root, nil
}

func (a *Authority) loadIntermediate(dir string, root *Issuer) (*Issuer, error) {
	certPEM, keyPEM, err := read2(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	rootPEM, chainPEM, err := read2(filepath.Join(dir, RootCertFile), filepath.Join(dir, CertChainFile))
	if err != nil {
		return nil, err
	}
	inter, err := parseIssuer(certPEM, keyPEM, CACertFile, CAKeyFile)
	if err != nil {
		return nil, err
	}
	if inter.Cert.MaxPathLen != 0 || !inter.Cert.MaxPathLenZero {
		return nil, invalidf("%s may sign other CAs (MaxPathLen is not 0)", CACertFile)
	}
	pool := x509.NewCertPool()
	pool.AddCert(root.Cert)
	if _, err := inter.Cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: a.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, invalidf("%s does not chain to the root: %v", CACertFile, err)
	}
	if !bytes.Equal(rootPEM, EncodeCertificates([]*x509.Certificate{root.Cert})) {
		return nil, invalidf("%s is not the environment's root", RootCertFile)
	}
	if !bytes.Equal(chainPEM, EncodeCertificates([]*x509.Certificate{inter.Cert, root.Cert})) {
		return nil, invalidf("%s is not %s followed by the root", CertChainFile, CACertFile)
	}
	if err := a.checkTime(inter.Cert, CACertFile); err != nil {
		return nil, err
	}
	return inter, nil
}

// checkTime renews a certificate with less than a third of its lifetime
// left, so that a renewed environment never runs into an expiry mid-test.
func (a *Authority) checkTime(c *x509.Certificate, name string) error {
	now := a.now()
	life := c.NotAfter.Sub(c.NotBefore)
	switch {
	case now.Before(c.NotBefore):
		return invalidf("%s is not valid before %s", name, c.NotBefore.UTC().Format(time.RFC3339))
	case !now.Before(c.NotAfter):
		return invalidf("%s expired at %s", name, c.NotAfter.UTC().Format(time.RFC3339))
	case c.NotAfter.Sub(now) < life/3:
		return invalidf("%s expires at %s, within the last third of its lifetime", name, c.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// parseIssuer parses a CA certificate and its key and checks they belong
// together.
func parseIssuer(certPEM, keyPEM []byte, certName, keyName string) (*Issuer, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, invalidf("%s holds no PEM certificate", certName)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, invalidf("%s: %v", certName, err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, invalidf("%s is not a CA certificate", certName)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, invalidf("%s holds no PEM key", keyName)
	}
	key, err := parseKey(kb.Bytes)
	if err != nil {
		return nil, invalidf("%s: %v", keyName, err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, invalidf("%s does not match %s", keyName, certName)
	}
	return &Issuer{Cert: cert, Key: key}, nil
}

// parseKey reads a private key in any of the encodings cacerts files come
// in: PKCS#8 (what meshctl writes), SEC 1 EC or PKCS#1 RSA (plugged-in CAs).
func parseKey(der []byte) (crypto.Signer, error) {
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, errors.New("PKCS#8 key is not a signing key")
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS1PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("not a PKCS#8, EC or PKCS#1 private key: %w", err)
	}
	return k, nil
}

// read2 reads two files. Both missing is fs.ErrNotExist (nothing to reuse);
// one missing is invalid (a half-written CA, to renew).
//
// A file that exists but checkFile distrusts is invalid too: renewed.
func read2(p1, p2 string) ([]byte, []byte, error) {
	chk1, chk2 := checkFile(p1), checkFile(p2)
	miss1, miss2 := errors.Is(chk1, fs.ErrNotExist), errors.Is(chk2, fs.ErrNotExist)
	for _, e := range []error{chk1, chk2} {
		var inv invalid
		if errors.As(e, &inv) && !(miss1 && miss2) {
			return nil, nil, e
		}
	}
	b1, err1 := os.ReadFile(p1)
	b2, err2 := os.ReadFile(p2)
	miss1, miss2 = errors.Is(err1, fs.ErrNotExist), errors.Is(err2, fs.ErrNotExist)
	switch {
	case miss1 && miss2:
		return nil, nil, fmt.Errorf("%s: %w", p1, fs.ErrNotExist)
	case miss1:
		return nil, nil, invalidf("%s is missing", filepath.Base(p1))
	case miss2:
		return nil, nil, invalidf("%s is missing", filepath.Base(p2))
	case err1 != nil:
		return nil, nil, fmt.Errorf("reading CA file: %w", err1)
	case err2 != nil:
		return nil, nil, fmt.Errorf("reading CA file: %w", err2)
	}
	return b1, b2, nil
}
