package signer

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/csr"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// NodeNameExtra is the user-info extra key in which the API server records
// the node a service-account token is bound to (Kubernetes >= 1.30).
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Signer approves and signs meshctl workload CSRs.
type Signer struct {
	cs          kubernetes.Interface
	ca          *meshca.CA
	signerName  string
	trustDomain string
	proxyUsers  map[string]bool
	maxTTL      time.Duration
	autoApprove bool
	now         func() time.Time
	log         *slog.Logger
	cleanup     time.Duration // finished CSRs are deleted this long after they finish
	retries     int           // attempts at a CSR whose pod lookup failed transiently
	retryBase   time.Duration // first backoff; doubled per attempt
}

// Option configures a Signer.
type Option func(*Signer)

// WithSignerName overrides csr.SignerName.
func WithSignerName(n string) Option { return func(s *Signer) { s.signerName = n } }

// WithTrustDomain sets the trust domain of issued identities.
func WithTrustDomain(td string) Option { return func(s *Signer) { s.trustDomain = td } }

// WithProxyUsers sets the users allowed to request workload identities: the
// node proxy's service account, e.g. system:serviceaccount:istio-system:ztunnel.
func WithProxyUsers(users ...string) Option {
	return func(s *Signer) {
		for _, u := range users {
			s.proxyUsers[u] = true
		}
	}
}

// WithMaxTTL caps certificate lifetimes.
func WithMaxTTL(d time.Duration) Option { return func(s *Signer) { s.maxTTL = d } }

// WithAutoApprove makes the signer approve (or deny) CSRs itself, as istiod
// does for its own signer; without it, CSRs wait for another approver.
func WithAutoApprove(b bool) Option { return func(s *Signer) { s.autoApprove = b } }

// DefaultCleanupAfter is how long a finished CSR (issued, denied or failed)
// is kept for the proxy to read its certificate (it polls every 250 ms)
// before the signer deletes it. The signer deletes them, not the proxy: the
// proxy's RBAC then needs no delete on CSRs, which RBAC cannot narrow to the
// proxy's own (generated names), so a compromised node could otherwise
// delete every CSR in the cluster.
const DefaultCleanupAfter = 2 * time.Minute

// WithClock sets the time source for validity periods.
func WithClock(now func() time.Time) Option { return func(s *Signer) { s.now = now } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(s *Signer) { s.log = l } }

// New returns a Signer that signs with c through the API at cs.
func New(cs kubernetes.Interface, c *meshca.CA, opts ...Option) *Signer {
	s := &Signer{cs: cs, ca: c, signerName: csr.SignerName, trustDomain: ambient.DefaultTrustDomain,
		proxyUsers: map[string]bool{}, maxTTL: 24 * time.Hour, autoApprove: true,
		now: time.Now, log: slog.New(slog.DiscardHandler), cleanup: DefaultCleanupAfter,
		retries: 10, retryBase: 500 * time.Millisecond}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Run reconciles every CSR, then each one that changes, until ctx ends. A
// broken watch is re-established after a full re-list, so no CSR is missed.
func (s *Signer) Run(ctx context.Context) error {
	api := s.cs.CertificatesV1().CertificateSigningRequests()
	for ctx.Err() == nil {
		list, err := api.List(ctx, metav1.ListOptions{})
		if err != nil {
			s.log.Warn("list CSRs", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		for i := range list.Items {
			s.reconcileLogged(ctx, &list.Items[i])
		}
		w, err := api.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			s.log.Warn("watch CSRs", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		// Not every watch implementation ends when ctx does (fakes don't).
		stop := context.AfterFunc(ctx, w.Stop)
		for ev := range w.ResultChan() {
			if obj, ok := ev.Object.(*certv1.CertificateSigningRequest); ok {
				s.reconcileLogged(ctx, obj)
			}
		}
		stop()
		w.Stop()
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (s *Signer) reconcileLogged(ctx context.Context, obj *certv1.CertificateSigningRequest) {
	s.reconcileRetry(ctx, obj.Name, 0)
}

// reconcileRetry reconciles name and, when the answer was "cannot decide
// yet" (the API server throttled or failed the pod lookup), tries again
// with backoff: no watch event may come for the CSR again.
func (s *Signer) reconcileRetry(ctx context.Context, name string, attempt int) {
	err := s.Reconcile(ctx, name)
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return
	}
	s.log.Warn("reconcile CSR", "csr", name, "err", err, "attempt", attempt+1)
	if !errors.Is(err, errTransient) || attempt+1 >= s.retries {
		return
	}
	backoff := min(s.retryBase<<attempt, 30*time.Second)
	time.AfterFunc(backoff, func() {
		if ctx.Err() == nil {
			s.reconcileRetry(ctx, name, attempt+1)
		}
	})
}

// Reconcile handles one CSR by name: approve or deny it (with auto-approve),
// then sign it once approved, or mark it Failed if the rule no longer holds.
func (s *Signer) Reconcile(ctx context.Context, name string) error {
	api := s.cs.CertificatesV1().CertificateSigningRequests()
	obj, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get CSR %s: %w", name, err)
	}
	if obj.Spec.SignerName != s.signerName {
		return nil
	}
	if len(obj.Status.Certificate) > 0 || hasCondition(obj, certv1.CertificateDenied) || hasCondition(obj, certv1.CertificateFailed) {
		return s.collect(ctx, obj)
	}
	uri, authErr := s.authorize(ctx, obj)
	if errors.Is(authErr, errTransient) {
		return authErr
	}
	if !hasCondition(obj, certv1.CertificateApproved) {
		if !s.autoApprove {
			return nil
		}
		cond := certv1.CertificateSigningRequestCondition{
			Type: certv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "MeshctlNodeCheck", Message: "requested by the proxy on the pod's node",
			LastUpdateTime: metav1.NewTime(s.now()),
		}
		if authErr != nil {
			cond.Type, cond.Reason, cond.Message = certv1.CertificateDenied, "MeshctlNodeCheck", authErr.Error()
			s.log.Info("denied workload CSR", "csr", name, "err", authErr)
		}
		obj.Status.Conditions = append(obj.Status.Conditions, cond)
		obj, err = api.UpdateApproval(ctx, name, obj, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("approve CSR %s: %w", name, err)
		}
		if authErr != nil {
			return nil
		}
	}
	if authErr != nil {
		// Approved by someone else, but the node rule fails: never sign.
		return s.fail(ctx, obj, "MeshctlNodeCheck", authErr)
	}
	notBefore := s.now().Add(-time.Minute) // tolerate small clock skew between nodes
	ttl := s.maxTTL
	if obj.Spec.ExpirationSeconds != nil {
		ttl = min(ttl, time.Duration(*obj.Spec.ExpirationSeconds)*time.Second)
	}
	chain, err := s.ca.SignCSR(obj.Spec.Request, uri, notBefore, s.now().Add(ttl))
	if err != nil {
		return s.fail(ctx, obj, "SigningFailed", err)
	}
	obj.Status.Certificate = append(meshca.EncodeCertificates(chain), s.ca.RootsPEM()...)
	if _, err := api.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("store certificate of CSR %s: %w", name, err)
	}
	s.log.Info("signed workload certificate", "csr", name, "identity", uri.String(), "node", obj.Spec.Extra[NodeNameExtra])
	return nil
}

// collect deletes a finished CSR once the proxy has had time to read it,
// and otherwise comes back to it then.
func (s *Signer) collect(ctx context.Context, obj *certv1.CertificateSigningRequest) error {
	finished := obj.CreationTimestamp.Time
	for _, c := range obj.Status.Conditions {
		if c.LastUpdateTime.After(finished) {
			finished = c.LastUpdateTime.Time
		}
	}
	if wait := finished.Add(s.cleanup).Sub(s.now()); wait > 0 {
		name := obj.Name
		time.AfterFunc(wait, func() {
			if ctx.Err() == nil {
				s.reconcileLogged(ctx, &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}})
			}
		})
		return nil
	}
	uid := obj.UID
	err := s.cs.CertificatesV1().CertificateSigningRequests().Delete(ctx, obj.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete finished CSR %s: %w", obj.Name, err)
	}
	return nil
}

func (s *Signer) fail(ctx context.Context, obj *certv1.CertificateSigningRequest, reason string, cause error) error {
	obj.Status.Conditions = append(obj.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateFailed, Status: corev1.ConditionTrue, Reason: reason, Message: cause.Error(),
		LastUpdateTime: metav1.NewTime(s.now()),
	})
	if _, err := s.cs.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("mark CSR %s failed: %w", obj.Name, err)
	}
	s.log.Info("refused to sign workload CSR", "csr", obj.Name, "err", cause)
	return nil
}

var (
	errNotAllowed = errors.New("not allowed")
	errTransient  = errors.New("cannot decide yet")
)

// authorize applies the node rule and returns the identity to issue.
func (s *Signer) authorize(ctx context.Context, obj *certv1.CertificateSigningRequest) (*urlT, error) {
	if !s.proxyUsers[obj.Spec.Username] {
		return nil, fmt.Errorf("%w: user %q is not a node proxy", errNotAllowed, obj.Spec.Username)
	}
	nodes := obj.Spec.Extra[NodeNameExtra]
	if len(nodes) != 1 || nodes[0] == "" {
		return nil, fmt.Errorf("%w: the requester's token is not bound to a node", errNotAllowed)
	}
	ns, name, uid := obj.Annotations[csr.AnnotationPodNamespace], obj.Annotations[csr.AnnotationPodName], obj.Annotations[csr.AnnotationPodUID]
	if ns == "" || name == "" || uid == "" {
		return nil, fmt.Errorf("%w: the CSR does not name a pod", errNotAllowed)
	}
	pod, err := s.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: pod %s/%s: %w", errNotAllowed, ns, name, err)
	}
	if err != nil {
		// Throttled, timed out, API server restarting: no answer about
		// the pod yet, so no verdict either; Reconcile is retried.
		return nil, fmt.Errorf("%w: pod %s/%s: %w", errTransient, ns, name, err)
	}
	switch {
	case pod.Spec.HostNetwork:
		// It shares the node's network namespace: the proxy never serves it.
		return nil, fmt.Errorf("%w: pod %s/%s uses the host network", errNotAllowed, ns, name)
	case slices.Contains(ambient.DefaultExcludedNamespaces, ns):
		return nil, fmt.Errorf("%w: namespace %s is never meshed", errNotAllowed, ns)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return nil, fmt.Errorf("%w: pod %s/%s has finished (%s)", errNotAllowed, ns, name, pod.Status.Phase)
	}
	if string(pod.UID) != uid {
		return nil, fmt.Errorf("%w: pod %s/%s has UID %s, not %s", errNotAllowed, ns, name, pod.UID, uid)
	}
	if pod.Spec.NodeName != nodes[0] {
		return nil, fmt.Errorf("%w: pod %s/%s runs on node %q, the requester on %q", errNotAllowed, ns, name, pod.Spec.NodeName, nodes[0])
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	want := identity.New(s.trustDomain, ns, sa)
	block, _ := pem.Decode(obj.Spec.Request)
	if block == nil {
		return nil, fmt.Errorf("%w: the CSR request is not PEM", errNotAllowed)
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: parse the CSR request: %w", errNotAllowed, err)
	}
	if len(req.URIs) != 1 || req.URIs[0].String() != want.String() {
		return nil, fmt.Errorf("%w: the CSR asks for %v, the pod's identity is %s", errNotAllowed, req.URIs, want)
	}
	return want.URL(), nil
}

func hasCondition(obj *certv1.CertificateSigningRequest, t certv1.RequestConditionType) bool {
	for _, c := range obj.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

type urlT = url.URL
