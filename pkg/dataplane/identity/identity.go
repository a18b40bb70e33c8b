package identity

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Identity is a workload's SPIFFE identity in the Istio/Kubernetes layout.
type Identity struct {
	TrustDomain    string
	Namespace      string
	ServiceAccount string
}

// New returns the identity of a service account in a trust domain.
func New(trustDomain, namespace, serviceAccount string) Identity {
	return Identity{TrustDomain: trustDomain, Namespace: namespace, ServiceAccount: serviceAccount}
}

// String formats the identity as its SPIFFE URI.
func (i Identity) String() string {
	return "spiffe://" + i.TrustDomain + "/ns/" + i.Namespace + "/sa/" + i.ServiceAccount
}

// URL is the identity as the *url.URL that goes into a certificate's URI SAN.
func (i Identity) URL() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: i.TrustDomain, Path: "/ns/" + i.Namespace + "/sa/" + i.ServiceAccount}
}

// IsZero reports whether the identity is unset.
func (i Identity) IsZero() bool { return i == Identity{} }

// Parse parses a SPIFFE URI of the form spiffe://td/ns/<ns>/sa/<sa>. Anything
// else is refused: a lax parser here would let a certificate with a look-alike
// URI be mistaken for a workload identity.
func Parse(s string) (Identity, error) {
	rest, ok := strings.CutPrefix(s, "spiffe://")
	if !ok {
		return Identity{}, fmt.Errorf("parse identity %q: not a spiffe:// URI", s)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 || parts[1] != "ns" || parts[3] != "sa" {
		return Identity{}, fmt.Errorf("parse identity %q: want spiffe://<td>/ns/<ns>/sa/<sa>", s)
	}
	for _, p := range []string{parts[0], parts[2], parts[4]} {
		if p == "" || strings.ContainsAny(p, "?#%@: ") {
			return Identity{}, fmt.Errorf("parse identity %q: empty or invalid segment", s)
		}
	}
	return Identity{TrustDomain: parts[0], Namespace: parts[2], ServiceAccount: parts[4]}, nil
}

// FromCertificate returns the single SPIFFE identity of a leaf certificate.
// More than one URI SAN is refused because it makes "who is this?" ambiguous.
func FromCertificate(c *x509.Certificate) (Identity, error) {
	if len(c.URIs) != 1 {
		return Identity{}, fmt.Errorf("certificate has %d URI SANs, want exactly 1", len(c.URIs))
	}
	return Parse(c.URIs[0].String())
}

// errNoCertificate is returned when a peer presented no certificate.
var errNoCertificate = errors.New("peer presented no certificate")

// ErrWrongPeer is returned (wrapped) when a valid peer is not the identity
// required: secure naming refused it.
var ErrWrongPeer = errors.New("peer is not the required identity")

// Verify checks a peer's raw chain (leaf first) against the mesh roots at time
// now and returns the peer's identity. It requires the identity to be in
// trustDomain and, when want is non-zero, to equal want.
func Verify(rawCerts [][]byte, roots *x509.CertPool, trustDomain string, want Identity, now time.Time) (Identity, error) {
	if len(rawCerts) == 0 {
		return Identity{}, errNoCertificate
	}
	certs := make([]*x509.Certificate, 0, len(rawCerts))
	for _, raw := range rawCerts {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			return Identity{}, fmt.Errorf("parse peer certificate: %w", err)
		}
		certs = append(certs, c)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	// Key usage is not checked: Istio's CA issues workload certificates usable
	// for both client and server auth, and peers differ in which EKUs they set.
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return Identity{}, fmt.Errorf("verify peer chain: %w", err)
	}
	id, err := FromCertificate(certs[0])
	if err != nil {
		return Identity{}, fmt.Errorf("peer identity: %w", err)
	}
	if id.TrustDomain != trustDomain {
		return Identity{}, fmt.Errorf("peer %s: trust domain %q, want %q", id, id.TrustDomain, trustDomain)
	}
	if !want.IsZero() && id != want {
		return Identity{}, fmt.Errorf("%w: peer is %s, want %s", ErrWrongPeer, id, want)
	}
	return id, nil
}
