package csr

import (
	"context"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
)

// TestLongPodNamesMakeValidCSRNames: pod names up to 253 characters (and
// ones whose cut lands on '.' or '-') still give CSR names the API server
// accepts: it checks them as DNS subdomains, as the reactor here does.
func TestLongPodNamesMakeValidCSRNames(t *testing.T) {
	t.Parallel()
	api := fake.NewClientset()
	var names []string
	api.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*certv1.CertificateSigningRequest)
		names = append(names, obj.Name)
		if errs := validation.IsDNS1123Subdomain(obj.Name); len(errs) > 0 {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"},
				obj.Name, field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), obj.Name, strings.Join(errs, "; "))})
		}
		return false, nil, nil
	})
	// The signer's answer, so Fetch returns at once.
	api.PrependReactor("get", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &certv1.CertificateSigningRequest{Status: certv1.CertificateSigningRequestStatus{
			Conditions: []certv1.CertificateSigningRequestCondition{{Type: certv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "Test"}}}}, nil
	})
	c := NewClient(api, WithPollInterval(time.Millisecond))
	ns := strings.Repeat("n", 63)
	for _, pod := range []string{
		strings.Repeat("p", 253),
		strings.Repeat("a", 171) + "." + strings.Repeat("b", 81), // the cut lands on the dot
		strings.Repeat("a", 171) + "-" + strings.Repeat("b", 81),
		"short",
	} {
		_, _, err := c.Fetch(context.Background(), certs.Request{Identity: identity.New("cluster.local", ns, "sa"),
			Pod: certs.Pod{Namespace: ns, Name: pod, UID: "uid"}})
		if err == nil || !strings.Contains(err.Error(), "Denied") {
			t.Errorf("pod name of %d characters: %v (CSR name %q)", len(pod), err, names[len(names)-1])
		}
	}
}
