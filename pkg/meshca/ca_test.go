package meshca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"net/url"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

func TestIssueIsVerifiableWithCriticalURISAN(t *testing.T) {
	t.Parallel()
	c, err := NewTest("test")
	if err != nil {
		t.Fatal(err)
	}
	id := identity.New("cluster.local", "ns1", "sa1")
	now := time.Now()
	cert, err := c.Issue(id.URL(), now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got, err := identity.Verify(cert.Certificate, c.RootPool(), "cluster.local", id, now)
	if err != nil || got != id {
		t.Fatalf("Verify = %v, %v; want %v", got, err, id)
	}
	sanOID := asn1.ObjectIdentifier{2, 5, 29, 17}
	critical := false
	for _, e := range cert.Leaf.Extensions {
		if e.Id.Equal(sanOID) {
			critical = e.Critical
		}
	}
	if !critical {
		t.Error("URI SAN extension is not critical")
	}
	if _, ok := cert.Leaf.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("leaf key is %T, want ECDSA", cert.Leaf.PublicKey)
	}
	// Verification refuses the wrong trust domain, the wrong identity, and an
	// expired certificate.
	if _, err := identity.Verify(cert.Certificate, c.RootPool(), "other.domain", identity.Identity{}, now); err == nil {
		t.Error("Verify accepted a foreign trust domain")
	}
	if _, err := identity.Verify(cert.Certificate, c.RootPool(), "cluster.local", identity.New("cluster.local", "ns1", "other"), now); err == nil {
		t.Error("Verify accepted the wrong identity")
	}
	if _, err := identity.Verify(cert.Certificate, c.RootPool(), "cluster.local", id, now.Add(2*time.Hour)); err == nil {
		t.Error("Verify accepted an expired certificate")
	}
	other, _ := NewTest("other")
	if _, err := identity.Verify(cert.Certificate, other.RootPool(), "cluster.local", id, now); err == nil {
		t.Error("Verify accepted a chain to a foreign root")
	}
}

func TestSignCSRRefusesOtherIdentities(t *testing.T) {
	t.Parallel()
	c, err := NewTest("test")
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	asked, _ := url.Parse("spiffe://cluster.local/ns/a/sa/admin")
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{asked}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	allowed, _ := url.Parse("spiffe://cluster.local/ns/a/sa/app")
	if _, err := c.SignCSR(csr, allowed, time.Now(), time.Now().Add(time.Hour)); err == nil {
		t.Fatal("SignCSR signed an identity other than the authorised one")
	}
	chain, err := c.SignCSR(csr, asked, time.Now(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 2 || chain[0].URIs[0].String() != asked.String() {
		t.Fatalf("chain = %d certs, leaf %v", len(chain), chain[0].URIs)
	}
	// A leaf never outlives the intermediate.
	long, err := c.SignCSR(csr, asked, time.Now(), time.Now().Add(1000*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if long[0].NotAfter.After(chain[1].NotAfter) {
		t.Error("leaf outlives its issuer")
	}
}

func TestFromPEMRoundTrip(t *testing.T) {
	t.Parallel()
	c, err := NewTest("test")
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	chainPEM := EncodeCertificates(append(append([]*x509.Certificate{}, c.chain...), c.roots...))
	loaded, err := FromPEM(EncodeCertificates(c.chain[:1]), keyPEM, chainPEM, c.RootsPEM())
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded.chain) != 1 {
		t.Errorf("chain has %d certs, want just the intermediate", len(loaded.chain))
	}
	id := identity.New("td", "ns", "sa")
	cert, err := loaded.Issue(id.URL(), time.Now(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Verify(cert.Certificate, c.RootPool(), "td", id, time.Now()); err != nil {
		t.Fatal(err)
	}
}
