package xds

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/rawgrpc"
	"github.com/meshctl/meshctl/pkg/meshca"
)

const istiodName = "istiod.istio-system.svc"

// fakeIstiod is an ADS server the test drives stream by stream.
type fakeIstiod struct {
	streams chan *fakeStream
}

type fakeStream struct {
	t    *testing.T
	s    grpc.ServerStream
	md   metadata.MD
	done chan error
}

func (f *fakeStream) recv() *gotRequest {
	f.t.Helper()
	var fr rawgrpc.Frame
	if err := f.s.RecvMsg(&fr); err != nil {
		f.t.Fatalf("receiving a request: %v", err)
	}
	r, err := decodeRequest(fr.B)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fakeStream) send(b []byte) {
	f.t.Helper()
	if err := f.s.SendMsg(&rawgrpc.Frame{B: b}); err != nil {
		f.t.Fatalf("sending a response: %v", err)
	}
}

// end closes the stream with err (nil: a clean end, as istiod's
// MaxConnectionAge).
func (f *fakeStream) end(err error) { f.done <- err }

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
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Cert.Raw})
}

func startIstiod(t *testing.T, serving tls.Certificate) (*fakeIstiod, string) {
	t.Helper()
	f := &fakeIstiod{streams: make(chan *fakeStream, 4)}
	return f, f.serve(t, serving, "127.0.0.1:0")
}

// serve serves f on address until t ends and returns the address it
// listens on.
func (f *fakeIstiod) serve(t *testing.T, serving tls.Certificate, address string) string {
	t.Helper()
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serving}})), grpc.ForceServerCodec(rawgrpc.Codec{}))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "envoy.service.discovery.v3.AggregatedDiscoveryService",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName: "DeltaAggregatedResources", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, s grpc.ServerStream) error {
				md, _ := metadata.FromIncomingContext(s.Context())
				fs := &fakeStream{t: t, s: s, md: md, done: make(chan error, 1)}
				f.streams <- fs
				select {
				case err := <-fs.done:
					return err
				case <-s.Context().Done():
					return s.Context().Err()
				}
			},
		}},
	}, struct{}{})
	lis, err := net.Listen("tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func (f *fakeIstiod) next(t *testing.T) *fakeStream {
	t.Helper()
	select {
	case s := <-f.streams:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not connect")
		return nil
	}
}

// TestClientACKNACKAndReconnect drives the client as istiod would: the
// initial requests name the node as ztunnel does and subscribe by wildcard;
// a response with a bad resource is NACKed naming it; the model is synced
// only once both types were ACKed; after istiod ends the stream the client
// reconnects and reports the versions it holds, without the refused one.
func TestClientACKNACKAndReconnect(t *testing.T) {
	serving, root := servingPKI(t)
	istiod, address := startIstiod(t, serving)
	info := NodeInfo{IP: "10.0.0.7", PodName: "meshctl-proxy-x1", Namespace: "istio-system", NodeName: "node-1",
		Metadata: map[string]string{"CLUSTER_ID": "c1"}}
	node, err := info.Node()
	if err != nil {
		t.Fatal(err)
	}
	m := model.New("c1", "")
	store := policy.NewStore("")
	src, err := NewSource(Config{Address: address, ServerName: istiodName,
		Roots: func() ([]byte, error) { return root, nil }, Token: func() (string, error) { return "tok", nil },
		ClusterID: "c1", Node: node, InitialBackoff: time.Millisecond}, store, "c1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, m) }()
	defer func() { cancel(); <-done }()

	s := istiod.next(t)
	if got := s.md.Get("authorization"); len(got) != 1 || got[0] != "Bearer tok" {
		t.Fatalf("authorization %v", got)
	}
	if got := s.md.Get("clusterid"); len(got) != 1 || got[0] != "c1" {
		t.Fatalf("clusterid %v", got)
	}
	for _, typ := range []string{AddressType, AuthorizationType} {
		r := s.recv()
		if r.TypeURL != typ || len(r.Subscribe) != 0 || r.Nonce != "" || len(r.Versions) != 0 {
			t.Fatalf("initial request %+v", r)
		}
		if r.NodeID != "ztunnel~10.0.0.7~meshctl-proxy-x1.istio-system~istio-system.svc.cluster.local" {
			t.Fatalf("node id %q", r.NodeID)
		}
		for k, v := range map[string]string{"NAME": "meshctl-proxy-x1", "NAMESPACE": "istio-system", "INSTANCE_IPS": "10.0.0.7", "NODE_NAME": "node-1", "CLUSTER_ID": "c1"} {
			if r.Metadata[k] != v {
				t.Fatalf("metadata %s = %v, want %s (%v)", k, r.Metadata[k], v, r.Metadata)
			}
		}
	}

	broken := testWorkload{uid: "c1//Pod/ns/broken", name: "broken", ns: "ns", rawAddr: []byte{1}}
	s.send(encodeResponse(AddressType, "n1", [][]byte{
		resource(server.uid, "v1", AddressType, server.encode()),
		resource("ns-b/echo.ns-b.svc.cluster.local", "v1", AddressType, echo.encode()),
		resource(broken.uid, "v1", AddressType, broken.encode()),
	}))
	nack := s.recv()
	if nack.Nonce != "n1" || nack.TypeURL != AddressType || !strings.HasPrefix(nack.ErrorDetail, broken.uid+": ") {
		t.Fatalf("NACK %+v", nack)
	}
	if _, res := m.Resolve(netip.MustParseAddrPort("10.96.0.10:80")); res != model.Found {
		t.Fatalf("the valid resources of a NACKed response were not applied: %v", res)
	}
	s.send(encodeResponse(AuthorizationType, "n2", [][]byte{
		resource("ns-b/allow-a", "v1", AuthorizationType, authz("allow-a", "ns-b", 2, 0, principalMatch("cluster.local/ns/ns-a/sa/sa-a"))),
	}))
	if ack := s.recv(); ack.Nonce != "n2" || ack.ErrorDetail != "" || ack.TypeURL != AuthorizationType {
		t.Fatalf("ACK %+v", ack)
	}
	if len(store.Dump()) != 1 {
		t.Fatalf("policy store %v", store.Dump())
	}
	if m.Synced() {
		t.Fatal("synced before the addresses were ACKed")
	}
	s.send(encodeResponse(AddressType, "n3", nil, broken.uid))
	if ack := s.recv(); ack.Nonce != "n3" || ack.ErrorDetail != "" {
		t.Fatalf("ACK %+v", ack)
	}
	waitFor(t, "model synced", m.Synced)

	// istiod restarts: the stream ends cleanly; the client comes back at
	// once with what it holds.
	s.end(nil)
	s = istiod.next(t)
	addrReq, authReq := s.recv(), s.recv()
	if want := map[string]string{server.uid: "v1", "ns-b/echo.ns-b.svc.cluster.local": "v1"}; fmt.Sprint(addrReq.Versions) != fmt.Sprint(want) {
		t.Fatalf("address versions on reconnect %v, want %v", addrReq.Versions, want)
	}
	if fmt.Sprint(authReq.Versions) != fmt.Sprint(map[string]string{"ns-b/allow-a": "v1"}) {
		t.Fatalf("authorization versions on reconnect %v", authReq.Versions)
	}
	// While away the policy was deleted: istiod says so on reconnect.
	s.send(encodeResponse(AuthorizationType, "n4", nil, "ns-b/allow-a"))
	if ack := s.recv(); ack.Nonce != "n4" || ack.ErrorDetail != "" {
		t.Fatalf("ACK %+v", ack)
	}
	waitFor(t, "policy removed", func() bool { return len(store.Dump()) == 0 })
	if st := src.Stats(); st.Connects != 2 || st.NACKs != 1 || st.ACKs != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// TestClientRefusesAnUnverifiedIstiod: a server whose certificate does not
// chain to the mesh root gets no request (and the proxy no model).
func TestClientRefusesAnUnverifiedIstiod(t *testing.T) {
	serving, _ := servingPKI(t)
	_, otherRoot := servingPKI(t)
	istiod, address := startIstiod(t, serving)
	var handshakes atomic.Int32
	src, err := NewSource(Config{Address: address, ServerName: istiodName,
		Roots: func() ([]byte, error) { handshakes.Add(1); return otherRoot, nil }, Token: func() (string, error) { return "tok", nil },
		InitialBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}, policy.NewStore(""), "c1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, model.New("c1", "")) }()
	waitFor(t, "two handshakes", func() bool { return handshakes.Load() >= 2 })
	cancel()
	<-done
	select {
	case <-istiod.streams:
		t.Fatal("a stream reached a server the mesh root does not vouch for")
	default:
	}
}

// TestClientReconnectsOnceIstiodIsBack: while istiod is away opening the
// stream fails and the wait before the next attempt grows (here to an
// hour); istiod coming back on the same address (a new pod behind the
// Service) ends that wait as soon as the channel reconnects.
func TestClientReconnectsOnceIstiodIsBack(t *testing.T) {
	serving, root := servingPKI(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := lis.Addr().String()
	_ = lis.Close() // istiod is away: connections are refused
	retries := make(chan time.Duration, 16)
	c, err := NewClient(Config{Address: address, ServerName: istiodName,
		Roots: func() ([]byte, error) { return root, nil }, Token: func() (string, error) { return "tok", nil },
		Types: []string{AddressType}, InitialBackoff: time.Hour, MaxBackoff: time.Hour,
		Log: slog.New(retryLog(retries))}, handlerFunc(func(string, []Resource, []string) []Reject { return nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer run(c)()

	select {
	case wait := <-retries:
		if wait != time.Hour {
			t.Fatalf("retry in %v after a failure to connect, want the hour the backoff grew to", wait)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt did not fail")
	}
	istiod := &fakeIstiod{streams: make(chan *fakeStream, 4)}
	istiod.serve(t, serving, address)
	s := istiod.next(t) // within 30 s, not an hour
	if r := s.recv(); r.TypeURL != AddressType {
		t.Fatalf("initial request %+v", r)
	}
	if st := c.Stats(); st.Connects != 1 {
		t.Fatalf("stats %+v", st)
	}
	if n := len(retries); n != 0 {
		t.Fatalf("%d more failed attempts before the stream opened", n)
	}
}

// TestClientBacksOffWithAReadyChannel: a channel that is Ready does not
// cut the wait short, so a stream that cannot be opened although istiod
// is there (here: the token cannot be read) is retried with backoff, not
// in a loop.
func TestClientBacksOffWithAReadyChannel(t *testing.T) {
	serving, root := servingPKI(t)
	istiod, address := startIstiod(t, serving)
	var tokens atomic.Int32
	c, err := NewClient(Config{Address: address, ServerName: istiodName,
		Roots: func() ([]byte, error) { return root, nil },
		Token: func() (string, error) {
			if tokens.Add(1) == 1 {
				return "tok", nil
			}
			return "", errors.New("token file gone")
		},
		Types: []string{AddressType}, InitialBackoff: 5 * time.Millisecond, MaxBackoff: time.Hour},
		handlerFunc(func(string, []Resource, []string) []Reject { return nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer run(c)()

	s := istiod.next(t)
	s.recv()
	if st := c.conn.GetState(); st != connectivity.Ready {
		t.Fatalf("channel %v with a stream open", st)
	}
	s.end(nil) // reopened at once, then the token fails: 10, 20, 40... ms apart
	time.Sleep(time.Second)
	// Backoff allows some 8 attempts in a second (the wait doubles from
	// 10 ms); a loop would make thousands.
	if n := tokens.Load(); n < 3 || n > 20 {
		t.Fatalf("%d attempts in a second", n)
	}
	if st := c.conn.GetState(); st != connectivity.Ready {
		t.Fatalf("channel %v, want it Ready throughout", st)
	}
}

// retryLog sends the wait of every reconnect the client logs (as long as
// waits has room).
func retryLog(waits chan<- time.Duration) slog.Handler { return retryHandler{waits} }

type retryHandler struct{ waits chan<- time.Duration }

func (retryHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h retryHandler) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry" {
			select {
			case h.waits <- a.Value.Duration():
			default:
			}
		}
		return true
	})
	return nil
}
func (h retryHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h retryHandler) WithGroup(string) slog.Handler      { return h }

func TestBackoff(t *testing.T) {
	c := &Client{cfg: Config{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 15 * time.Second}}
	for _, tc := range []struct {
		err  error
		wait time.Duration
		want time.Duration
	}{
		{&connError{err: errors.New("refused")}, time.Second, 2 * time.Second},
		{&connError{err: errors.New("refused")}, 10 * time.Second, 15 * time.Second},
		{nil, 8 * time.Second, 10 * time.Millisecond},
		{io.EOF, 8 * time.Second, 10 * time.Millisecond},
		{status.Error(codes.Unavailable, "transport is closing"), 8 * time.Second, 10 * time.Millisecond},
		{status.Error(codes.Unavailable, "connection reset"), time.Second, 2 * time.Second},
		{status.Error(codes.PermissionDenied, "authorization failed"), time.Second, 2 * time.Second},
		{status.Error(codes.Canceled, ""), time.Second, 10 * time.Millisecond},
		{errors.New("decoding DeltaDiscoveryResponse"), time.Second, 2 * time.Second},
	} {
		if got := c.nextBackoff(tc.err, tc.wait); got != tc.want {
			t.Errorf("%v after %v: %v, want %v", tc.err, tc.wait, got, tc.want)
		}
	}
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for range 3000 {
		if f() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// run runs c until the returned stop is called, which waits for Run to end.
func run(c *Client) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() { cancel(); <-done }
}
