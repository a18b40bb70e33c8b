package istioca

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pilot/pkg/features"
	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/multicluster"
	istiolog "istio.io/istio/pkg/log"
	"istio.io/istio/pkg/security"
	"istio.io/istio/pkg/test"
	"istio.io/istio/security/pkg/k8s/tokenreview"
	pkica "istio.io/istio/security/pkg/pki/ca"
	"istio.io/istio/security/pkg/pki/util"
	caserver "istio.io/istio/security/pkg/server/ca"
	"istio.io/istio/security/pkg/server/ca/authenticate/kubeauth"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"

	"github.com/meshctl/meshctl/pkg/dataplane/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/certs/istioca"
	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

const (
	td         = "cluster.local"
	clusterID  = "cluster1"
	istiodName = "istiod.istio-system.svc"
	proxyToken = "proxy-token"
)

var (
	// The proxy's own pod, trusted to impersonate (CA_TRUSTED_NODE_ACCOUNTS).
	proxyPod = pod("istio-system", "meshctl-proxy-x1", "meshctl-proxy", "uid-proxy", "node-1")
	onNode   = pod("ns-a", "app-1", "sa-a", "uid-a", "node-1")
	offNode  = pod("ns-b", "app-2", "sa-b", "uid-b", "node-2")
)

func init() {
	for _, s := range istiolog.Scopes() {
		s.SetOutputLevel(istiolog.NoneLevel)
	}
}

func pod(ns, name, sa, uid, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, NodeName: node},
	}
}

type meshHolder struct{}

func (meshHolder) Mesh() *meshconfig.MeshConfig { return &meshconfig.MeshConfig{TrustDomain: td} }

// istiod is Istio's CA server as istiod runs it on 15012: a self-signed
// IstioCA, the Kubernetes JWT authenticator (TokenReview answered by a fake
// API server that knows the proxy's token for audience istio-ca), and the
// node authorizer watching the cluster's pods.
type istiod struct {
	ca      *pkica.IstioCA
	rootPEM []byte
	serving tls.Certificate
	server  *caserver.Server
}

func newIstiod(t *testing.T) *istiod {
	t.Helper()
	opts, err := pkica.NewSelfSignedDebugIstioCAOptions("", 24*time.Hour, 2*time.Hour, 24*time.Hour, td, 2048)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pkica.NewIstioCA(opts)
	if err != nil {
		t.Fatal(err)
	}
	// istiod's own serving certificate, signed by its CA (as istiod does
	// without cert-manager), for the name the proxy dials.
	csr, key, err := util.GenCSR(util.CertOptions{Host: istiodName, ECSigAlg: util.EcdsaSigAlg})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := c.Sign(csr, pkica.CertOpts{SubjectIDs: []string{istiodName}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(certPEM, key)
	if err != nil {
		t.Fatal(err)
	}

	apiserver := fake.NewClientset()
	apiserver.PrependReactor("create", "tokenreviews", func(a ktesting.Action) (bool, runtime.Object, error) {
		tr := a.(ktesting.CreateAction).GetObject().(*authnv1.TokenReview)
		if tr.Spec.Token != proxyToken || !slices.Contains(tr.Spec.Audiences, "istio-ca") {
			tr.Status = authnv1.TokenReviewStatus{Error: "token not valid for these audiences"}
			return true, tr, nil
		}
		tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{
			Username: "system:serviceaccount:istio-system:meshctl-proxy",
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:istio-system", "system:authenticated"},
			Extra: map[string]authnv1.ExtraValue{
				tokenreview.PodNameKey: {proxyPod.Name},
				tokenreview.PodUIDKey:  {string(proxyPod.UID)},
			},
		}}
		return true, tr, nil
	})
	auth := kubeauth.NewKubeJWTAuthenticator(meshHolder{}, apiserver, clusterID, nil, nil)

	test.SetForTest(t, &features.CATrustedNodeAccounts, map[types.NamespacedName]struct{}{
		{Namespace: "istio-system", Name: "meshctl-proxy"}: {},
	})
	mc := multicluster.NewFakeController()
	server, err := caserver.New(c, time.Hour, []security.Authenticator{auth}, mc)
	if err != nil {
		t.Fatal(err)
	}
	pods := kube.NewFakeClient(proxyPod, onNode, offNode)
	stop := test.NewStop(t)
	mc.Add(clusterID, pods, stop)
	pods.RunAndWait(stop)
	return &istiod{ca: c, rootPEM: c.GetCAKeyCertBundle().GetRootCertPem(), serving: serving, server: server}
}

func (i *istiod) serve(t *testing.T, lis net.Listener) {
	t.Helper()
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{i.serving}})))
	i.server.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
}

func newClient(t *testing.T, addr string, root []byte) *istioca.Client {
	t.Helper()
	c, err := istioca.New(istioca.Config{
		Address: addr, ServerName: istiodName,
		Roots:     func() ([]byte, error) { return root, nil },
		Token:     func() (string, error) { return proxyToken, nil },
		ClusterID: clusterID, TTL: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitState(t *testing.T, m *certs.Manager, id identity.Identity, match func(string) bool) string {
	t.Helper()
	var last string
	for range 2000 {
		for _, d := range m.Dump() {
			if d.Identity == id.String() {
				last = d.State
			}
		}
		if match(last) {
			return last
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s: state never matched; last %q", id, last)
	return ""
}

// TestInteropIstioCASignsImpersonatedIdentity: Istio's CA signs for a pod on the
// proxy's node, with a chain that verifies against istiod's root and the
// pod's SPIFFE ID as the only URI SAN; a pod on another node is refused.
func TestInteropIstioCASignsImpersonatedIdentity(t *testing.T) {
	srv := newIstiod(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.serve(t, lis)
	m := certs.New(newClient(t, lis.Addr().String(), srv.rootPEM), certs.WithBackoff(20*time.Millisecond, 100*time.Millisecond))
	defer m.Close()

	want := identity.New(td, "ns-a", "sa-a")
	m.Track(want, certs.Pod{Namespace: "ns-a", Name: "app-1", UID: "uid-a"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cert, err := m.Certificate(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(srv.rootPEM) {
		t.Fatal("istiod root does not parse")
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		inter.AddCert(c)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("issued chain does not verify against istiod's root: %v", err)
	}
	if len(cert.Leaf.URIs) != 1 || cert.Leaf.URIs[0].String() != want.String() {
		t.Fatalf("SAN = %v, want %s", cert.Leaf.URIs, want)
	}
	if d := m.Dump(); d[0].State != certs.StateAvailable || len(d[0].RootCerts) != 1 {
		t.Errorf("dump = %+v", d[0])
	}

	refused := identity.New(td, "ns-b", "sa-b")
	m.Track(refused, certs.Pod{Namespace: "ns-b", Name: "app-2", UID: "uid-b"})
	st := waitState(t, m, refused, func(s string) bool { return strings.HasPrefix(s, "Unavailable") })
	if want := "Unavailable: signing gRPC error (The request does not have valid authentication credentials): request impersonation authentication failure"; st != want {
		t.Errorf("impersonating a pod on another node: state %q, want %q", st, want)
	}
}

// TestInteropIstioCAUnavailableThenRecovers: with istiod down the certificate is
// Unavailable with ztunnel's reason; once istiod listens it becomes
// Available without intervention.
func TestInteropIstioCAUnavailableThenRecovers(t *testing.T) {
	srv := newIstiod(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	m := certs.New(newClient(t, addr, srv.rootPEM), certs.WithBackoff(20*time.Millisecond, 100*time.Millisecond))
	defer m.Close()
	id := identity.New(td, "ns-a", "sa-a")
	m.Track(id, certs.Pod{Namespace: "ns-a", Name: "app-1", UID: "uid-a"})
	st := waitState(t, m, id, func(s string) bool { return strings.HasPrefix(s, "Unavailable") })
	if want := "Unavailable: signing gRPC error (The service is currently unavailable): "; !strings.HasPrefix(st, want) || !strings.Contains(st, "connection refused") {
		t.Errorf("state %q, want prefix %q and the reason", st, want)
	}
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s was taken meanwhile: %v", addr, err)
	}
	srv.serve(t, lis)
	waitState(t, m, id, func(s string) bool { return s == certs.StateAvailable })
}
