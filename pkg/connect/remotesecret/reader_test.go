package remotesecret

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestReaderNamesAreNotIstios: Istio's base chart owns
// istio-reader-service-account and its istiod chart
// istio-reader-clusterrole-<ns>; Helm cannot install over objects of those
// names that it did not create. (bench/ checks the names against Istio's
// charts themselves.)
func TestReaderNamesAreNotIstios(t *testing.T) {
	t.Parallel()
	for _, n := range []string{ServiceAccount, TokenSecret, ClusterRole} {
		switch n {
		case "istio-reader-service-account", "istio-reader-clusterrole-istio-system", "istio-reader-istio-system":
			t.Errorf("reader object %q takes a name Istio's charts own", n)
		}
	}
	if TokenSecret != "meshctl-reader-istio-remote-secret-token" {
		t.Errorf("token secret %q is not what istioctl create-remote-secret --service-account %s names it", TokenSecret, ServiceAccount)
	}
}

// TestRemoveLegacyReader: the reader objects an earlier meshctl made under
// Istio's names go; the same names made by Istio's charts (no meshctl label)
// stay.
func TestRemoveLegacyReader(t *testing.T) {
	t.Parallel()
	ours := metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/managed-by": "meshctl"}}
	helms := metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/managed-by": "Helm"}}
	with := func(m metav1.ObjectMeta, name, ns string) metav1.ObjectMeta {
		m = *m.DeepCopy()
		m.Name, m.Namespace = name, ns
		return m
	}
	l := legacyReader
	for _, tc := range []struct {
		name     string
		meta     metav1.ObjectMeta
		wantGone bool
	}{{"meshctl's", ours, true}, {"Istio's", helms, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := []runtime.Object{
				&corev1.ServiceAccount{ObjectMeta: with(tc.meta, l.serviceAccount, Namespace)},
				&corev1.Secret{ObjectMeta: with(tc.meta, l.tokenSecret, Namespace), Type: corev1.SecretTypeServiceAccountToken},
				&rbacv1.ClusterRole{ObjectMeta: with(tc.meta, l.clusterRole, "")},
				&rbacv1.ClusterRoleBinding{ObjectMeta: with(tc.meta, l.clusterRole, "")},
			}
			c := fake.NewClientset(objs...)
			ctx := context.Background()
			if err := removeLegacyReader(ctx, c); err != nil {
				t.Fatal(err)
			}
			gone := func(err error) bool { return apierrors.IsNotFound(err) }
			_, e1 := c.CoreV1().ServiceAccounts(Namespace).Get(ctx, l.serviceAccount, metav1.GetOptions{})
			_, e2 := c.CoreV1().Secrets(Namespace).Get(ctx, l.tokenSecret, metav1.GetOptions{})
			_, e3 := c.RbacV1().ClusterRoles().Get(ctx, l.clusterRole, metav1.GetOptions{})
			_, e4 := c.RbacV1().ClusterRoleBindings().Get(ctx, l.clusterRole, metav1.GetOptions{})
			for what, err := range map[string]error{"service account": e1, "token secret": e2, "cluster role": e3, "binding": e4} {
				if gone(err) != tc.wantGone {
					t.Errorf("%s: gone %v, want %v (err %v)", what, gone(err), tc.wantGone, err)
				}
			}
			// Nothing there at all is no error either.
			if err := removeLegacyReader(ctx, fake.NewClientset()); err != nil {
				t.Errorf("empty cluster: %v", err)
			}
		})
	}
}
