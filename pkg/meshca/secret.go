package meshca

import (
	"context"
	"fmt"
	"maps"
	"sort"

	"github.com/meshctl/meshctl/internal/parallel"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Where Istio's control plane looks for a plugged-in CA.
const (
	Namespace  = "istio-system"
	SecretName = "cacerts"
)

// Secret actions.
const (
	SecretCreated   = "created"
	SecretUpdated   = "updated"
	SecretUnchanged = "unchanged"
)

// managedBy marks the Secret as meshctl's, for people reading the cluster.
var managedBy = map[string]string{"app.kubernetes.io/managed-by": "meshctl"}

// InstallSecret creates or updates the cacerts Secret (type Opaque, the four
// cacerts keys) in istio-system, creating the namespace if missing, so that
// istiod starts with the cluster's intermediate instead of a self-signed
// root. Re-running with the same files changes nothing.
func InstallSecret(ctx context.Context, client kubernetes.Interface, certs Cacerts) (string, error) {
	for _, k := range []string{CACertFile, CAKeyFile, RootCertFile, CertChainFile} {
		if len(certs[k]) == 0 {
			return "", fmt.Errorf("installing %s/%s: %s is empty", Namespace, SecretName, k)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	data := map[string][]byte{}
	for _, k := range []string{CACertFile, CAKeyFile, RootCertFile, CertChainFile} {
		data[k] = certs[k]
	}
	secrets := client.CoreV1().Secrets(Namespace)
	cur, err := secrets.Get(ctx, SecretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: Namespace, Labels: maps.Clone(managedBy)},
			Type:       corev1.SecretTypeOpaque,
			Data:       data,
		}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("creating %s/%s: %w", Namespace, SecretName, err)
		}
		return SecretCreated, nil
	case err != nil:
		return "", fmt.Errorf("reading %s/%s: %w", Namespace, SecretName, err)
	case cur.Type != corev1.SecretTypeOpaque && cur.Type != "":
		// A Secret's type is immutable; one of another type is not ours to
		// replace.
		return "", fmt.Errorf("%s/%s exists with type %s, want %s: delete it first", Namespace, SecretName, cur.Type, corev1.SecretTypeOpaque)
	case maps.EqualFunc(cur.Data, data, bytesEqual) && cur.Labels["app.kubernetes.io/managed-by"] == "meshctl":
		return SecretUnchanged, nil
	}
	cur.Data = data
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	maps.Copy(cur.Labels, managedBy)
	// The resourceVersion from Get makes a concurrent change a conflict
	// error rather than a silent overwrite.
	if _, err := secrets.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("updating %s/%s: %w", Namespace, SecretName, err)
	}
	return SecretUpdated, nil
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// Install gives every cluster its intermediate as the istio-system/cacerts
// Secret: the files are created or reused (Ensure), then the Secrets are
// installed concurrently, each through the kubeconfig file named for its
// cluster. It is what `meshctl up` and pkg/meshtest both do after creating
// clusters; errors name the cluster, every one is reported.
func (a *Authority) Install(ctx context.Context, kubeconfigs map[string]string) error {
	names := make([]string, 0, len(kubeconfigs))
	for n := range kubeconfigs {
		names = append(names, n)
	}
	sort.Strings(names)
	if _, err := a.Ensure(names...); err != nil {
		return err
	}
	return parallel.ForEach(names, func(name string) error {
		if err := a.installIn(ctx, name, kubeconfigs[name]); err != nil {
			return fmt.Errorf("cluster %q: %w", name, err)
		}
		return nil
	})
}

func (a *Authority) installIn(ctx context.Context, name, kubeconfig string) error {
	certs, err := a.Cacerts(name)
	if err != nil {
		return err
	}
	cs, err := a.clients.File(kubeconfig, "").Kubernetes()
	if err != nil {
		return err
	}
	_, err = InstallSecret(ctx, cs, certs)
	return err
}
