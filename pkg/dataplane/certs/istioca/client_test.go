package istioca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/rawgrpc"
	"github.com/meshctl/meshctl/pkg/meshca"
)

const istiodName = "istiod.istio-system.svc"

var workload = identity.New("cluster.local", "ns-a", "sa-a")

// fakeIstiod is a minimal IstioCertificateService: it checks what ztunnel
// sends (bearer token, clusterid, impersonated identity, TTL) and signs
// with a meshctl test CA.
type fakeIstiod struct {
	signer *meshca.CA
	token  string

	mu       sync.Mutex
	requests []*request
	md       []metadata.MD
	deny     error // returned instead of signing when set
}

func (f *fakeIstiod) handle(ctx context.Context, in *request) ([]string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.requests = append(f.requests, in)
	f.md = append(f.md, md)
	deny := f.deny
	f.mu.Unlock()
	if deny != nil {
		return nil, deny
	}
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+f.token {
		return nil, status.Error(codes.Unauthenticated, "request authenticate failure")
	}
	who := in.Metadata.GetFields()[impersonatedIdentityKey].GetStringValue()
	id, err := identity.Parse(who)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "impersonated identity: %v", err)
	}
	now := time.Now()
	chain, err := f.signer.SignCSR([]byte(in.CSR), id.URL(), now.Add(-time.Minute), now.Add(time.Duration(in.ValidityDuration)*time.Second))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "CSR signing error (%v)", err)
	}
	// Istio's shape: one certificate per element, the root(s) last.
	var out []string
	for _, c := range chain {
		out = append(out, string(meshca.EncodeCertificates([]*x509.Certificate{c})))
	}
	return append(out, string(f.signer.RootsPEM())), nil
}

func (f *fakeIstiod) serve(t *testing.T, lis net.Listener, serving tls.Certificate) *grpc.Server {
	t.Helper()
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serving}})),
		grpc.ForceServerCodec(rawgrpc.Codec{}),
	)
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "istio.v1.auth.IstioCertificateService",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "CreateCertificate",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in rawgrpc.Frame
				if err := dec(&in); err != nil {
					return nil, err
				}
				req, err := unmarshalRequest(in.B)
				if err != nil {
					return nil, status.Error(codes.InvalidArgument, err.Error())
				}
				chain, err := f.handle(ctx, req)
				if err != nil {
					return nil, err
				}
				return &rawgrpc.Frame{B: marshalResponse(chain)}, nil
			},
		}},
	}, struct{}{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv
}

// servingPKI is istiod's serving certificate for istiodName and the root it
// chains to (what istio-ca-root-cert holds).
func servingPKI(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	root, err := meshca.NewIssuer(&x509.Certificate{
		Subject:   pkix.Name{Organization: []string{"cluster.local"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), DNSNames: []string{istiodName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}, root.Cert, key.Public(), root.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key},
		meshca.EncodeCertificates([]*x509.Certificate{root.Cert})
}

type fixture struct {
	istiod  *fakeIstiod
	serving tls.Certificate
	root    []byte
	client  *Client
	addr    string
}

func newFixture(t *testing.T, clientRoot []byte) *fixture {
	t.Helper()
	signer, err := meshca.NewTest("istiod")
	if err != nil {
		t.Fatal(err)
	}
	serving, root := servingPKI(t)
	if clientRoot == nil {
		clientRoot = root
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{istiod: &fakeIstiod{signer: signer, token: "sa-token"}, serving: serving, root: root, addr: lis.Addr().String()}
	f.istiod.serve(t, lis, serving)
	f.client = f.newClient(t, clientRoot)
	return f
}

func (f *fixture) newClient(t *testing.T, root []byte) *Client {
	t.Helper()
	c, err := New(Config{
		Address: f.addr, ServerName: istiodName,
		Roots:     func() ([]byte, error) { return root, nil },
		Token:     func() (string, error) { return "sa-token", nil },
		ClusterID: "cluster1", TTL: 2 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitState(t *testing.T, m *certs.Manager, match func(string) bool) string {
	t.Helper()
	var last string
	for range 1000 {
		if d := m.Dump(); len(d) == 1 {
			last = d[0].State
			if match(last) {
				return last
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("certificate state never matched; last %q", last)
	return ""
}

func TestFetchImpersonatedIdentity(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	m := certs.New(f.client)
	defer m.Close()
	m.Track(workload, certs.Pod{Namespace: "ns-a", Name: "pod-a", UID: "1"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cert, err := m.Certificate(ctx, workload)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Verify(cert.Certificate, m.Roots(), "cluster.local", workload, time.Now()); err != nil {
		t.Fatalf("certificate does not verify against the roots istiod returned: %v", err)
	}
	if st := m.Dump()[0].State; st != certs.StateAvailable {
		t.Errorf("state = %q, want Available", st)
	}
	f.istiod.mu.Lock()
	defer f.istiod.mu.Unlock()
	req, md := f.istiod.requests[0], f.istiod.md[0]
	if got := req.Metadata.GetFields()[impersonatedIdentityKey].GetStringValue(); got != workload.String() {
		t.Errorf("ImpersonatedIdentity = %q, want %q", got, workload)
	}
	if req.ValidityDuration != 7200 {
		t.Errorf("validity_duration = %d, want 7200", req.ValidityDuration)
	}
	if !strings.HasPrefix(req.CSR, "-----BEGIN CERTIFICATE REQUEST-----") {
		t.Errorf("csr is not PEM: %q", req.CSR)
	}
	if got := md.Get("clusterid"); len(got) != 1 || got[0] != "cluster1" {
		t.Errorf("clusterid header = %q", got)
	}
	if got := md.Get("content-type"); len(got) != 1 || got[0] != "application/grpc+proto" && got[0] != "application/grpc" {
		t.Errorf("content-type = %q", got)
	}
}

func TestServerErrorsReadAsZtunnels(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.istiod.deny = status.Error(codes.Unauthenticated, "request impersonation authentication failure")
	_, _, err := f.client.Fetch(context.Background(), certs.Request{Identity: workload, CSR: []byte("x")})
	want := "signing gRPC error (The request does not have valid authentication credentials): request impersonation authentication failure"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("status code lost: %v", status.Code(err))
	}
}

func TestWrongMeshRootIsUnavailable(t *testing.T) {
	t.Parallel()
	_, otherRoot := servingPKI(t)
	f := newFixture(t, otherRoot)
	m := certs.New(f.client, certs.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	defer m.Close()
	m.Track(workload, certs.Pod{UID: "1"})
	st := waitState(t, m, func(s string) bool { return strings.HasPrefix(s, "Unavailable") })
	for _, want := range []string{"Unavailable: signing gRPC error (The service is currently unavailable): ", "cert verification failed"} {
		if !strings.Contains(st, want) {
			t.Errorf("state %q lacks %q", st, want)
		}
	}
	f.istiod.mu.Lock()
	defer f.istiod.mu.Unlock()
	if len(f.istiod.requests) != 0 {
		t.Errorf("a request reached an unverified istiod")
	}
}

func TestUnavailableThenRecovers(t *testing.T) {
	t.Parallel()
	signer, err := meshca.NewTest("istiod")
	if err != nil {
		t.Fatal(err)
	}
	serving, root := servingPKI(t)
	// A port nobody listens on until the test starts istiod there.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	f := &fixture{istiod: &fakeIstiod{signer: signer, token: "sa-token"}, addr: addr}
	m := certs.New(f.newClient(t, root), certs.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	defer m.Close()
	m.Track(workload, certs.Pod{UID: "1"})
	if st := m.Dump()[0].State; st != certs.StateInitializing && !strings.HasPrefix(st, "Unavailable") {
		t.Errorf("first state = %q, want Initializing (or already Unavailable)", st)
	}
	st := waitState(t, m, func(s string) bool { return strings.HasPrefix(s, "Unavailable") })
	if want := "Unavailable: signing gRPC error (The service is currently unavailable): "; !strings.HasPrefix(st, want) || !strings.Contains(st, "connection refused") {
		t.Errorf("state %q, want prefix %q and the reason (connection refused)", st, want)
	}
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s was taken meanwhile: %v", addr, err)
	}
	f.istiod.serve(t, lis, serving)
	waitState(t, m, func(s string) bool { return s == certs.StateAvailable })
}

func TestMessagesRoundTrip(t *testing.T) {
	t.Parallel()
	req := &request{CSR: "csr", ValidityDuration: 86400}
	b, err := req.marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := unmarshalRequest(b)
	if err != nil || got.CSR != "csr" || got.ValidityDuration != 86400 || got.Metadata != nil {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	// An unknown field (a future server's) is skipped.
	resp := append(marshalResponse([]string{"a", "b"}), 0x10, 0x01)
	chain, err := unmarshalResponse(resp)
	if err != nil || fmt.Sprint(chain) != "[a b]" {
		t.Fatalf("response = %q, %v", chain, err)
	}
	if _, err := unmarshalResponse([]byte{0x0a, 0x05, 'a'}); err == nil {
		t.Error("truncated response decoded")
	}
	if _, _, err := splitChain("x", []string{"leaf"}); err == nil || !strings.Contains(err.Error(), "no root") {
		t.Errorf("single-element chain: %v", err)
	}
}
