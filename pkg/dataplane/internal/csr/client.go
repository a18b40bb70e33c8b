package csr

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// The contract between the node proxy and the signer.
const (
	// SignerName is meshctl's certificates.k8s.io signer.
	SignerName = "meshctl.dev/workload"
	// Annotations naming the pod a CSR asks an identity for.
	AnnotationPodNamespace = "meshctl.dev/pod-namespace"
	AnnotationPodName      = "meshctl.dev/pod-name"
	AnnotationPodUID       = "meshctl.dev/pod-uid"
)

// Client is a certs.Fetcher backed by CertificateSigningRequests.
type Client struct {
	cs       kubernetes.Interface
	signer   string
	ttl      time.Duration
	interval time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithTTL sets the requested certificate lifetime (the signer may shorten it).
func WithTTL(d time.Duration) Option { return func(c *Client) { c.ttl = d } }

// WithPollInterval sets how often the CSR is checked for the certificate.
func WithPollInterval(d time.Duration) Option { return func(c *Client) { c.interval = d } }

// NewClient returns a Client using cs, which must authenticate as the node
// proxy's service account.
func NewClient(cs kubernetes.Interface, opts ...Option) *Client {
	c := &Client{cs: cs, signer: SignerName, ttl: 24 * time.Hour, interval: 250 * time.Millisecond}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Fetch creates a CSR for req, waits until it is issued, denied or failed (or
// ctx ends), and returns the chain and the mesh roots.
func (c *Client) Fetch(ctx context.Context, req certs.Request) ([]byte, []byte, error) {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	seconds := int32(c.ttl / time.Second)
	obj := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name: objectName(req.Pod.Namespace, req.Pod.Name, hex.EncodeToString(suffix[:])),
			Annotations: map[string]string{
				AnnotationPodNamespace: req.Pod.Namespace,
				AnnotationPodName:      req.Pod.Name,
				AnnotationPodUID:       req.Pod.UID,
			},
		},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:           req.CSR,
			SignerName:        c.signer,
			ExpirationSeconds: &seconds,
			Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment,
				certv1.UsageClientAuth, certv1.UsageServerAuth},
		},
	}
	csrs := c.cs.CertificatesV1().CertificateSigningRequests()
	created, err := csrs.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("create CSR for %s: %w", req.Identity, err)
	}
	// The signer deletes the CSR once finished: the proxy's RBAC has no
	// delete, which it could not be given for its own CSRs only.
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		got, err := csrs.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("get CSR %s: %w", created.Name, err)
		}
		for _, cond := range got.Status.Conditions {
			if (cond.Type == certv1.CertificateDenied || cond.Type == certv1.CertificateFailed) && cond.Status == corev1.ConditionTrue {
				return nil, nil, fmt.Errorf("CSR %s for %s %s: %s: %s", created.Name, req.Identity, cond.Type, cond.Reason, cond.Message)
			}
		}
		if len(got.Status.Certificate) > 0 {
			return splitRoots(got.Status.Certificate)
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("CSR %s for %s not issued: %w", created.Name, req.Identity, ctx.Err())
		case <-t.C:
		}
	}
}

// maxNameLen is the longest object name the API server takes (a DNS
// subdomain).
const maxNameLen = 253

// objectName is meshctl-<namespace>-<pod>-<suffix>, the pod part cut so
// the whole stays a valid DNS subdomain: a pod name alone may be 253
// characters. The random suffix keeps cut names unique; the annotations,
// not the name, say which pod the CSR is for.
func objectName(namespace, pod, suffix string) string {
	base := "meshctl-" + namespace + "-" + pod
	if limit := maxNameLen - len(suffix) - 1; len(base) > limit {
		// A cut may end a label on '.' or '-', which may not precede '-'.
		base = strings.TrimRight(base[:limit], ".-")
	}
	return base + "-" + suffix
}

// splitRoots separates the self-signed roots the signer appends to the chain.
func splitRoots(pemChain []byte) ([]byte, []byte, error) {
	all, err := meshca.ParseCertificates(pemChain)
	if err != nil {
		return nil, nil, fmt.Errorf("issued chain: %w", err)
	}
	var chain, roots []*x509Cert
	for _, c := range all {
		if bytes.Equal(c.RawIssuer, c.RawSubject) && c.CheckSignatureFrom(c) == nil {
			roots = append(roots, c)
		} else {
			chain = append(chain, c)
		}
	}
	if len(chain) == 0 {
		return nil, nil, fmt.Errorf("issued chain has no leaf")
	}
	return meshca.EncodeCertificates(chain), meshca.EncodeCertificates(roots), nil
}

type x509Cert = x509.Certificate
