package remotesecret

import (
	"bytes"
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Remote secret actions.
const (
	SecretCreated   = "created"
	SecretUpdated   = "updated"
	SecretUnchanged = "unchanged"
)

// Build makes the remote secret of cluster name as istioctl does: one key,
// the cluster's name, holding a kubeconfig whose cluster, user and context
// are all named after it, with the API server address, its CA (PEM) and the
// reader's token. It is pure: Manager fills in the live values.
func Build(name, server string, ca, token []byte) (*corev1.Secret, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: string(token)}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	if err := clientcmd.Validate(*cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig for %s: %w", name, err)
	}
	kc, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding kubeconfig for %s: %w", name, err)
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        SecretPrefix + name,
			Namespace:   Namespace,
			Labels:      map[string]string{MultiClusterLabel: "true"},
			Annotations: map[string]string{ClusterAnnotation: name},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{name: kc},
	}, nil
}

// apply writes a remote secret into a target cluster: created, or updated in
// place when its data, labels or annotation differ. Data is replaced whole:
// istiod reads every key of a remote secret as a cluster, so a stale key
// would be a stale cluster.
func apply(ctx context.Context, client kubernetes.Interface, want *corev1.Secret) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	secrets := client.CoreV1().Secrets(Namespace)
	cur, err := secrets.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := secrets.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("creating %s/%s: %w", Namespace, want.Name, err)
		}
		return SecretCreated, nil
	case err != nil:
		return "", fmt.Errorf("reading %s/%s: %w", Namespace, want.Name, err)
	case cur.Type != corev1.SecretTypeOpaque && cur.Type != "":
		// A Secret's type is immutable.
		return "", fmt.Errorf("%s/%s exists with type %s, want %s: delete it first", Namespace, want.Name, cur.Type, corev1.SecretTypeOpaque)
	case same(cur, want):
		return SecretUnchanged, nil
	}
	cur.Data = want.Data
	cur.StringData = nil
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	maps.Copy(cur.Labels, want.Labels)
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	maps.Copy(cur.Annotations, want.Annotations)
	if _, err := secrets.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("updating %s/%s: %w", Namespace, want.Name, err)
	}
	return SecretUpdated, nil
}

// same reports whether cur already says everything want says.
func same(cur, want *corev1.Secret) bool {
	if !maps.EqualFunc(cur.Data, want.Data, bytes.Equal) {
		return false
	}
	for k, v := range want.Labels {
		if cur.Labels[k] != v {
			return false
		}
	}
	for k, v := range want.Annotations {
		if cur.Annotations[k] != v {
			return false
		}
	}
	return true
}
