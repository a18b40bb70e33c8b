package signer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/csr"
	"github.com/meshctl/meshctl/pkg/meshca"
)

const proxyUser = "system:serviceaccount:istio-system:ztunnel"

// apiServer is a fake clientset that, like the real API server, stamps each
// created CSR with the authenticated requester (user and bound node).
type apiServer struct {
	*fake.Clientset
	mu         sync.Mutex
	user, node string
}

func (a *apiServer) as(user, node string) {
	a.mu.Lock()
	a.user, a.node = user, node
	a.mu.Unlock()
}

func newAPIServer(objs ...runtime.Object) *apiServer {
	a := &apiServer{Clientset: fake.NewClientset(objs...)}
	a.PrependReactor("create", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj := action.(k8stesting.CreateAction).GetObject().(*certv1.CertificateSigningRequest)
		a.mu.Lock()
		obj.Spec.Username = a.user
		if a.node != "" {
			obj.Spec.Extra = map[string]certv1.ExtraValue{NodeNameExtra: {a.node}}
		}
		a.mu.Unlock()
		return false, nil, nil
	})
	return a
}

func pod(ns, name, uid, sa, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node, ServiceAccountName: sa},
	}
}

func csrFor(t *testing.T, id identity.Identity) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id.URL()}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestOnlyThePodsNodeGetsItsIdentity(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("signer")
	if err != nil {
		t.Fatal(err)
	}
	api := newAPIServer(pod("default", "app", "uid-app", "app-sa", "node-1"))
	var skew atomic.Int64 // the signer's clock runs ahead by this much
	s := New(api, c, WithProxyUsers(proxyUser), WithClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	client := csr.NewClient(api, csr.WithPollInterval(10*time.Millisecond), csr.WithTTL(time.Hour))
	appID := identity.New("cluster.local", "default", "app-sa")
	appPod := certs.Pod{Namespace: "default", Name: "app", UID: "uid-app"}
	fetch := func(user, node string, id identity.Identity, p certs.Pod) ([]byte, []byte, error) {
		api.as(user, node)
		fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
		defer fcancel()
		return client.Fetch(fctx, certs.Request{Identity: id, Pod: p, CSR: csrFor(t, id)})
	}

	// The proxy on the pod's node gets a chain that verifies as the pod.
	chainPEM, rootsPEM, err := fetch(proxyUser, "node-1", appID, appPod)
	if err != nil {
		t.Fatal(err)
	}
	chain, _ := meshca.ParseCertificates(chainPEM)
	roots, _ := meshca.ParseCertificates(rootsPEM)
	if len(chain) != 2 || len(roots) != 1 {
		t.Fatalf("chain %d certs, roots %d; want 2 and 1", len(chain), len(roots))
	}
	pool := x509.NewCertPool()
	pool.AddCert(roots[0])
	raw := [][]byte{chain[0].Raw, chain[1].Raw}
	if _, err := identity.Verify(raw, pool, "cluster.local", appID, time.Now()); err != nil {
		t.Fatalf("issued chain: %v", err)
	}
	if life := chain[0].NotAfter.Sub(chain[0].NotBefore); life > time.Hour+2*time.Minute {
		t.Errorf("lifetime %v exceeds the requested hour", life)
	}

	for _, tc := range []struct {
		name, user, node string
		id               identity.Identity
		pod              certs.Pod
		want             string
	}{
		{"proxy on another node", proxyUser, "node-2", appID, appPod, `runs on node "node-1"`},
		{"token not bound to a node", proxyUser, "", appID, appPod, "not bound to a node"},
		{"not the proxy", "system:serviceaccount:default:app-sa", "node-1", appID, appPod, "not a node proxy"},
		{"another service account", proxyUser, "node-1", identity.New("cluster.local", "default", "admin"), appPod, "the pod's identity is"},
		{"stale pod UID", proxyUser, "node-1", appID, certs.Pod{Namespace: "default", Name: "app", UID: "old"}, "has UID"},
		{"no such pod", proxyUser, "node-1", appID, certs.Pod{Namespace: "default", Name: "gone", UID: "x"}, "not found"},
	} {
		_, _, err := fetch(tc.user, tc.node, tc.id, tc.pod)
		if err == nil || !strings.Contains(err.Error(), "Denied") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want Denied with %q", tc.name, err, tc.want)
		}
	}
	// The proxy deletes nothing (its RBAC has no delete): the signer
	// deletes finished CSRs, issued or not, once the proxy has had
	// DefaultCleanupAfter to read them.
	csrs := api.CertificatesV1().CertificateSigningRequests()
	list, err := csrs.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 7 {
		t.Fatalf("%d CSRs right after they finished (%v), want all 7", len(list.Items), err)
	}
	for _, a := range api.Actions() {
		if a.GetVerb() == "delete" {
			t.Fatalf("a CSR was deleted before the cleanup delay: %v", a)
		}
	}
	skew.Store(int64(DefaultCleanupAfter + time.Minute))
	for _, o := range list.Items {
		if err := s.Reconcile(ctx, o.Name); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("reconcile %s: %v", o.Name, err)
		}
	}
	if list, err := csrs.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("%d CSRs left behind after the cleanup delay (%v)", len(list.Items), err)
	}
}

// TestApprovalByOthersCannotBypassTheNodeRule: with auto-approval off, a CSR
// approved by someone else for a pod on another node is marked Failed and
// never signed; a legitimate approved one is signed.
func TestApprovalByOthersCannotBypassTheNodeRule(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("signer")
	if err != nil {
		t.Fatal(err)
	}
	api := newAPIServer(pod("default", "app", "uid-app", "app-sa", "node-1"))
	s := New(api, c, WithProxyUsers(proxyUser), WithAutoApprove(false))
	ctx := context.Background()
	appID := identity.New("cluster.local", "default", "app-sa")
	create := func(name, node string) {
		api.as(proxyUser, node)
		_, err := api.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
				csr.AnnotationPodNamespace: "default", csr.AnnotationPodName: "app", csr.AnnotationPodUID: "uid-app"}},
			Spec: certv1.CertificateSigningRequestSpec{Request: csrFor(t, appID), SignerName: csr.SignerName,
				Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) *certv1.CertificateSigningRequest {
		obj, err := api.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	approve := func(name string) {
		obj := get(name)
		obj.Status.Conditions = append(obj.Status.Conditions, certv1.CertificateSigningRequestCondition{
			Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "SomeoneElse"})
		if _, err := api.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, obj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("wrong-node", "node-2")
	create("right-node", "node-1")
	// Unapproved CSRs are left alone without auto-approval.
	if err := s.Reconcile(ctx, "right-node"); err != nil {
		t.Fatal(err)
	}
	if obj := get("right-node"); len(obj.Status.Certificate) > 0 || len(obj.Status.Conditions) > 0 {
		t.Fatalf("unapproved CSR was acted on: %+v", obj.Status)
	}
	approve("wrong-node")
	approve("right-node")
	for _, n := range []string{"wrong-node", "right-node"} {
		if err := s.Reconcile(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if obj := get("wrong-node"); len(obj.Status.Certificate) > 0 || !hasCondition(obj, certv1.CertificateFailed) {
		t.Errorf("approved CSR from the wrong node: certificate %d bytes, conditions %+v", len(obj.Status.Certificate), obj.Status.Conditions)
	}
	if obj := get("right-node"); len(obj.Status.Certificate) == 0 {
		t.Errorf("approved CSR from the right node was not signed: %+v", obj.Status.Conditions)
	}
	// CSRs for other signers are none of our business.
	api.as(proxyUser, "node-1")
	other := &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "kubelet"},
		Spec: certv1.CertificateSigningRequestSpec{Request: csrFor(t, appID), SignerName: "kubernetes.io/kubelet-serving"}}
	if _, err := api.CertificatesV1().CertificateSigningRequests().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	approve("kubelet")
	if err := s.Reconcile(ctx, "kubelet"); err != nil {
		t.Fatal(err)
	}
	if obj := get("kubelet"); len(obj.Status.Certificate) > 0 || hasCondition(obj, certv1.CertificateFailed) {
		t.Error("signer touched a CSR for another signer")
	}
}

// runSigner starts s and returns a fetch as the proxy on node-1.
func runSigner(t *testing.T, api *apiServer, s *Signer) func(id identity.Identity, p certs.Pod) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	client := csr.NewClient(api, csr.WithPollInterval(10*time.Millisecond), csr.WithTTL(time.Hour))
	return func(id identity.Identity, p certs.Pod) error {
		api.as(proxyUser, "node-1")
		fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
		defer fcancel()
		_, _, err := client.Fetch(fctx, certs.Request{Identity: id, Pod: p, CSR: csrFor(t, id)})
		return err
	}
}

// TestPodsTheProxyNeverServesGetNoIdentity: a hostNetwork pod, a pod in
// kube-system and a finished pod are on the proxy's node with the right
// service account, and still get no certificate.
func TestPodsTheProxyNeverServesGetNoIdentity(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("signer")
	if err != nil {
		t.Fatal(err)
	}
	host := pod("default", "host", "uid-host", "app-sa", "node-1")
	host.Spec.HostNetwork = true
	done := pod("default", "done", "uid-done", "app-sa", "node-1")
	done.Status.Phase = corev1.PodSucceeded
	failed := pod("default", "failed", "uid-failed", "app-sa", "node-1")
	failed.Status.Phase = corev1.PodFailed
	sys := pod("kube-system", "dns", "uid-dns", "app-sa", "node-1")
	api := newAPIServer(host, done, failed, sys)
	fetch := runSigner(t, api, New(api, c, WithProxyUsers(proxyUser)))
	appID := identity.New("cluster.local", "default", "app-sa")
	for _, tc := range []struct {
		pod  certs.Pod
		id   identity.Identity
		want string
	}{
		{certs.Pod{Namespace: "default", Name: "host", UID: "uid-host"}, appID, "host network"},
		{certs.Pod{Namespace: "default", Name: "done", UID: "uid-done"}, appID, "finished"},
		{certs.Pod{Namespace: "default", Name: "failed", UID: "uid-failed"}, appID, "finished"},
		{certs.Pod{Namespace: "kube-system", Name: "dns", UID: "uid-dns"}, identity.New("cluster.local", "kube-system", "app-sa"), "never meshed"},
	} {
		err := fetch(tc.id, tc.pod)
		if err == nil || !strings.Contains(err.Error(), "Denied") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want Denied with %q", tc.pod.Name, err, tc.want)
		}
	}
}

// TestThrottledPodLookupIsRetriedNotDenied: the API server answers the
// signer's pod lookups with 429 Too Many Requests a few times; the CSR is
// signed once it answers, not denied for good.
func TestThrottledPodLookupIsRetriedNotDenied(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("signer")
	if err != nil {
		t.Fatal(err)
	}
	api := newAPIServer(pod("default", "app", "uid-app", "app-sa", "node-1"))
	var mu sync.Mutex
	throttled := 0
	api.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if throttled < 3 {
			throttled++
			return true, nil, apierrors.NewTooManyRequests("slow down", 1)
		}
		return false, nil, nil
	})
	s := New(api, c, WithProxyUsers(proxyUser))
	s.retryBase = 10 * time.Millisecond
	fetch := runSigner(t, api, s)
	if err := fetch(identity.New("cluster.local", "default", "app-sa"), certs.Pod{Namespace: "default", Name: "app", UID: "uid-app"}); err != nil {
		t.Fatalf("after 3 throttled lookups: %v", err)
	}
}
