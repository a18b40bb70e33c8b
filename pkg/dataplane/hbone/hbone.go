package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/netip"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	impl "github.com/meshctl/meshctl/pkg/dataplane/internal/hbone"
)

// Dialer opens HBONE tunnels, pooling h2 connections per source identity,
// gateway and expected peer.
type Dialer = impl.Dialer

// Target describes one tunnel to open: the source identity and address,
// the gateway the HBONE connection goes to, the original destination and
// the identity the server must prove.
type Target = impl.Target

// NewDialer returns a Dialer; WithClientCertificates and WithRoots are
// required.
func NewDialer(opts ...impl.Option) (*Dialer, error) { return impl.NewDialer(opts...) }

// NewServer returns the inbound side of HBONE (port 15008): it terminates
// mutual TLS and splices each CONNECT stream to its destination.
// WithServerCertificates and WithRoots are required.
func NewServer(opts ...impl.Option) (*impl.Server, error) { return impl.NewServer(opts...) }

// WithRoots sets the mesh roots; a function, because roots rotate.
func WithRoots(roots func() *x509.CertPool) impl.Option { return impl.WithRoots(roots) }

// WithServerCertificates sets how the server finds the certificate of the
// workload a connection is addressed to, by destination IP.
func WithServerCertificates(f func(ctx context.Context, dst netip.Addr) (*tls.Certificate, error)) impl.Option {
	return impl.WithServerCertificates(f)
}

// WithClientCertificates sets how the dialer finds a source workload's
// certificate.
func WithClientCertificates(f func(ctx context.Context, id identity.Identity) (*tls.Certificate, error)) impl.Option {
	return impl.WithClientCertificates(f)
}

// WithAllowLoopback lets CONNECT target loopback addresses, for tests and
// benchmarks on 127.0.0.1: in a pod it would expose the pod's
// localhost-only services to the mesh.
func WithAllowLoopback(allow bool) impl.Option { return impl.WithAllowLoopback(allow) }
