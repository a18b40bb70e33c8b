package istioca

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/rawgrpc"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// createCertificateMethod is the full gRPC method name of CreateCertificate.
const createCertificateMethod = "/istio.v1.auth.IstioCertificateService/CreateCertificate"

// impersonatedIdentityKey is the request metadata key naming the identity a
// node proxy asks for (istio.io/istio/pkg/security.ImpersonatedIdentity).
const impersonatedIdentityKey = "ImpersonatedIdentity"

// Config describes how to reach istiod's CA.
type Config struct {
	// Address is istiod's gRPC address, e.g. istiod.istio-system.svc:15012.
	Address string
	// ServerName is the name istiod's serving certificate is verified
	// against; empty means Address's host.
	ServerName string
	// Roots returns the PEM mesh roots that istiod's serving certificate
	// must chain to. It is called on every TLS handshake, so a rotated
	// istio-ca-root-cert is picked up without a restart.
	Roots func() ([]byte, error)
	// Token returns the service-account token sent as the bearer token;
	// called on every request, since projected tokens rotate.
	Token func() (string, error)
	// ClusterID is sent as the clusterid header: istiod authenticates the
	// token against that cluster (a remote cluster's proxy names its own).
	ClusterID string
	// TTL is the requested certificate lifetime (validity_duration).
	TTL time.Duration
	// Timeout bounds one CreateCertificate call; zero means 30 s.
	Timeout time.Duration
	// DialOptions are appended to the client's (tests dial in-memory
	// listeners with them).
	DialOptions []grpc.DialOption
}

// Client fetches certificates from istiod. It implements certs.Fetcher.
type Client struct {
	cfg  Config
	conn *grpc.ClientConn
}

var _ certs.Fetcher = (*Client)(nil)

// New returns a Client; it connects lazily, so istiod being down is not an
// error here but an Unavailable certificate state later.
func New(cfg Config) (*Client, error) {
	if cfg.Address == "" {
		return nil, errors.New("istiod CA address is empty")
	}
	if cfg.Roots == nil {
		return nil, errors.New("istiod CA: no mesh root source to verify istiod with")
	}
	if cfg.Token == nil {
		return nil, errors.New("istiod CA: no service-account token source")
	}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(cfg.Address)
		if err != nil {
			return nil, fmt.Errorf("istiod CA address %q: %w", cfg.Address, err)
		}
		cfg.ServerName = host
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(TransportCredentials(cfg.ServerName, cfg.Roots)),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawgrpc.Codec{})),
		// grpc-go's reconnect backoff would otherwise grow to 120 s on its
		// own, delaying recovery past the certs.Manager's next retry.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 15 * time.Second},
			MinConnectTimeout: 20 * time.Second,
		}),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Address, opts...)
	if err != nil {
		return nil, fmt.Errorf("istiod CA client for %s: %w", cfg.Address, err)
	}
	return &Client{cfg: cfg, conn: conn}, nil
}

// Close closes the connection to istiod.
func (c *Client) Close() error { return c.conn.Close() }

// TransportCredentials is TLS to istiod on 15012, its certificate verified
// for serverName against the mesh roots read at each handshake (so a
// rotated istio-ca-root-cert is picked up without a restart), as ztunnel
// verifies istiod for both its CA and XDS clients.
func TransportCredentials(serverName string, roots func() ([]byte, error)) credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		// Verification happens in VerifyConnection against roots read at
		// handshake time; the static RootCAs field would pin them.
		InsecureSkipVerify: true,
		VerifyConnection:   func(cs tls.ConnectionState) error { return verifyServer(cs, serverName, roots) },
	})
}

func verifyServer(cs tls.ConnectionState, name string, roots func() ([]byte, error)) error {
	pemRoots, err := roots()
	if err != nil {
		return fmt.Errorf("reading mesh root: %w", err)
	}
	parsed, err := meshca.ParseCertificates(pemRoots)
	if err != nil || len(parsed) == 0 {
		return fmt.Errorf("mesh root: no certificate: %w", errors.Join(err, errors.New("empty")))
	}
	pool := x509.NewCertPool()
	for _, r := range parsed {
		pool.AddCert(r)
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("istiod sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		DNSName: name, Roots: pool, Intermediates: inter,
	})
	if err != nil {
		return fmt.Errorf("cert verification failed: %w", err)
	}
	return nil
}

// Fetch asks istiod to sign req.CSR for req.Identity, impersonated by this
// node's proxy, and splits the answer into the chain (leaf first) and the
// roots (the last element, possibly several concatenated).
func (c *Client) Fetch(ctx context.Context, req certs.Request) ([]byte, []byte, error) {
	token, err := c.cfg.Token()
	if err != nil {
		return nil, nil, fmt.Errorf("loading service-account token: %w", err)
	}
	meta, err := structpb.NewStruct(map[string]any{impersonatedIdentityKey: req.Identity.String()})
	if err != nil {
		return nil, nil, err
	}
	body, err := (&request{
		CSR: string(req.CSR), ValidityDuration: int64(c.cfg.TTL / time.Second), Metadata: meta,
	}).marshal()
	if err != nil {
		return nil, nil, err
	}
	md := []string{"authorization", "Bearer " + token}
	if c.cfg.ClusterID != "" {
		md = append(md, "clusterid", c.cfg.ClusterID)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var resp rawgrpc.Frame
	if err := c.conn.Invoke(ctx, createCertificateMethod, &rawgrpc.Frame{B: body}, &resp); err != nil {
		return nil, nil, signingError(err)
	}
	chain, err := unmarshalResponse(resp.B)
	if err != nil {
		return nil, nil, err
	}
	return splitChain(req.Identity.String(), chain)
}

// splitChain separates Istio's single list into the chain and the root(s),
// which are its last element.
func splitChain(id string, chain []string) ([]byte, []byte, error) {
	if len(chain) == 0 {
		return nil, nil, fmt.Errorf("empty certificate response for %s", id)
	}
	if len(chain) == 1 {
		return nil, nil, errors.New("invalid root certificate: no root certificate present")
	}
	return []byte(joinPEM(chain[:len(chain)-1])), []byte(chain[len(chain)-1]), nil
}

func joinPEM(parts []string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p)
		if !strings.HasSuffix(p, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// signFailure is a failed CreateCertificate call. Its text is ztunnel's
// ("signing gRPC error (<code description>): <message>"), so config_dump
// states read the same from either proxy.
type signFailure struct{ Status *status.Status }

func (e *signFailure) Error() string {
	return fmt.Sprintf("signing gRPC error (%s): %s", describe(e.Status.Code()), e.Status.Message())
}

// GRPCStatus lets status.FromError see through the wrapper.
func (e *signFailure) GRPCStatus() *status.Status { return e.Status }

func signingError(err error) error {
	return &signFailure{Status: status.Convert(err)}
}

// describe is tonic's Code::description, which ztunnel prints.
func describe(c codes.Code) string {
	switch c {
	case codes.OK:
		return "The operation completed successfully"
	case codes.Canceled:
		return "The operation was cancelled"
	case codes.Unknown:
		return "Unknown error"
	case codes.InvalidArgument:
		return "Client specified an invalid argument"
	case codes.DeadlineExceeded:
		return "Deadline expired before operation could complete"
	case codes.NotFound:
		return "Some requested entity was not found"
	case codes.AlreadyExists:
		return "Some entity that we attempted to create already exists"
	case codes.PermissionDenied:
		return "The caller does not have permission to execute the specified operation"
	case codes.ResourceExhausted:
		return "Some resource has been exhausted"
	case codes.FailedPrecondition:
		return "The system is not in a state required for the operation's execution"
	case codes.Aborted:
		return "The operation was aborted"
	case codes.OutOfRange:
		return "Operation was attempted past the valid range"
	case codes.Unimplemented:
		return "Operation is not implemented or not supported"
	case codes.Internal:
		return "Internal error"
	case codes.Unavailable:
		return "The service is currently unavailable"
	case codes.DataLoss:
		return "Unrecoverable data loss or corruption"
	case codes.Unauthenticated:
		return "The request does not have valid authentication credentials"
	}
	return c.String()
}

// TokenFile reads a (projected, rotating) token file on every call.
func TokenFile(path string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("token file %s exists, but is empty", path)
		}
		return t, nil
	}
}
