package remotesecret

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Names of what meshctl creates in every source cluster. None is a name
// Istio's charts own: the base chart creates istio-reader-service-account and
// the istiod chart istio-reader-clusterrole-<namespace>, and Helm refuses to
// install over an object it does not own. The token Secret is named as
// `istioctl create-remote-secret --service-account meshctl-reader` names the
// one it creates, and the remote secret holds nothing of the account's name,
// so istioctl with that flag gives the same Secret.
const (
	Namespace      = "istio-system"
	ServiceAccount = "meshctl-reader"
	TokenSecret    = ServiceAccount + "-istio-remote-secret-token"
	ClusterRole    = "meshctl-reader"
	SecretPrefix   = "istio-remote-secret-"
	// MultiClusterLabel marks a Secret as a remote secret for istiod.
	MultiClusterLabel = "istio/multiCluster"
	// ClusterAnnotation names the cluster a remote secret gives access to.
	ClusterAnnotation = "networking.istio.io/cluster"
)

// legacyReader are the names earlier meshctl releases gave the reader: the
// service account and its token took the names Istio's base chart owns.
// ensureReader deletes those meshctl made (labelled managed-by meshctl; an
// account Istio's charts made is theirs and stays), so that `helm install`
// of Istio's base chart works on an environment brought up before.
var legacyReader = struct{ serviceAccount, tokenSecret, clusterRole string }{
	serviceAccount: "istio-reader-service-account",
	tokenSecret:    "istio-reader-service-account-istio-remote-secret-token",
	clusterRole:    "meshctl-istio-reader",
}

// managedBy marks meshctl's objects for people reading a cluster.
var managedBy = map[string]string{managedByKey: "meshctl"}

const managedByKey = "app.kubernetes.io/managed-by"

// readerRules are the rules of Istio's istio-reader-clusterrole (istiod
// chart, reader-clusterrole.yaml), without the istiodRemote extras: what a
// control plane reads from a cluster it does not run in.
var readerRules = []rbacv1.PolicyRule{
	{
		APIGroups: []string{"config.istio.io", "security.istio.io", "networking.istio.io", "authentication.istio.io", "rbac.istio.io", "telemetry.istio.io", "extensions.istio.io"},
		Resources: []string{"*"},
		Verbs:     []string{"get", "list", "watch"},
	},
	{
		APIGroups: []string{""},
		Resources: []string{"endpoints", "pods", "services", "nodes", "replicationcontrollers", "namespaces", "secrets", "configmaps"},
		Verbs:     []string{"get", "list", "watch"},
	},
	{APIGroups: []string{"networking.istio.io"}, Resources: []string{"workloadentries"}, Verbs: []string{"get", "watch", "list"}},
	{APIGroups: []string{"networking.x-k8s.io", "gateway.networking.k8s.io"}, Resources: []string{"gateways"}, Verbs: []string{"get", "watch", "list"}},
	{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceexports"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
	{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceimports"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
	{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
}

// remoteRules are what Istio's reader cluster role adds in a remote
// (istiodRemote.enabled): the primary's istiod, which manages the remote,
// keeps its leader-election ConfigMaps and istio-ca-root-cert there and
// patches its webhooks with its CA bundle. Without them that istiod's
// informer of the remote's webhooks never syncs: on kind the remote stayed
// `timeout` in /debug/clusterz, and its injection webhook was refused
// ("x509: certificate signed by unknown authority").
var remoteRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "list", "watch", "update"}},
	{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
	{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"get", "list", "watch", "update"}},
}

// rulesFor is the reader's rules in a cluster: a remote (whose control
// plane runs in another cluster) grants that control plane Istio's remote
// extras.
func rulesFor(remote bool) []rbacv1.PolicyRule {
	if !remote {
		return readerRules
	}
	return append(slices.Clone(readerRules), remoteRules...)
}

// credentials are what a remote secret holds of its source cluster.
type credentials struct {
	ca, token []byte
}

// ensureReader creates (or finds) the reader ServiceAccount, its ClusterRole
// (remote: with rulesFor's extras) and binding and its token Secret in a
// source cluster, and waits until the token controller has filled the
// Secret. It reports whether the token Secret was created now.
func (m *Manager) ensureReader(ctx context.Context, client kubernetes.Interface, remote bool) (credentials, string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return credentials{}, "", fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	if err := removeLegacyReader(ctx, client); err != nil {
		return credentials{}, "", err
	}
	sa, err := m.ensureServiceAccount(ctx, client)
	if err != nil {
		return credentials{}, "", err
	}
	if err := ensureClusterRole(ctx, client, rulesFor(remote)); err != nil {
		return credentials{}, "", err
	}
	if err := ensureBinding(ctx, client); err != nil {
		return credentials{}, "", err
	}
	action, err := ensureTokenSecret(ctx, client, sa)
	if err != nil {
		return credentials{}, "", err
	}
	creds, err := m.waitForToken(ctx, client)
	return creds, action, err
}

func (m *Manager) ensureServiceAccount(ctx context.Context, client kubernetes.Interface) (*corev1.ServiceAccount, error) {
	sas := client.CoreV1().ServiceAccounts(Namespace)
	sa, err := sas.Get(ctx, ServiceAccount, metav1.GetOptions{})
	if err == nil {
		return sa, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading service account %s/%s: %w", Namespace, ServiceAccount, err)
	}
	sa, err = sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Name: ServiceAccount, Namespace: Namespace, Labels: maps.Clone(managedBy),
	}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating service account %s/%s: %w", Namespace, ServiceAccount, err)
	}
	return sa, nil
}

func ensureClusterRole(ctx context.Context, client kubernetes.Interface, rules []rbacv1.PolicyRule) error {
	roles := client.RbacV1().ClusterRoles()
	cur, err := roles.Get(ctx, ClusterRole, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = roles.Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: ClusterRole, Labels: maps.Clone(managedBy)},
			Rules:      rules,
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating cluster role %s: %w", ClusterRole, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading cluster role %s: %w", ClusterRole, err)
	case equality.Semantic.DeepEqual(cur.Rules, rules):
		return nil
	}
	cur.Rules = rules
	if _, err := roles.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating cluster role %s: %w", ClusterRole, err)
	}
	return nil
}

func ensureBinding(ctx context.Context, client kubernetes.Interface) error {
	want := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRole, Labels: maps.Clone(managedBy)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccount, Namespace: Namespace}},
	}
	bindings := client.RbacV1().ClusterRoleBindings()
	cur, err := bindings.Get(ctx, ClusterRole, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading cluster role binding %s: %w", ClusterRole, err)
	case cur.RoleRef == want.RoleRef && equality.Semantic.DeepEqual(cur.Subjects, want.Subjects):
		return nil
	case cur.RoleRef == want.RoleRef:
		cur.Subjects = want.Subjects
		if _, err := bindings.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating cluster role binding %s: %w", ClusterRole, err)
		}
		return nil
	default:
		// A binding's roleRef is immutable: replace it.
		if err := bindings.Delete(ctx, ClusterRole, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing cluster role binding %s: %w", ClusterRole, err)
		}
	}
	if _, err := bindings.Create(ctx, want, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating cluster role binding %s: %w", ClusterRole, err)
	}
	return nil
}

// Token secret actions.
const (
	TokenCreated = "created"
	TokenReused  = "reused"
)

// ensureTokenSecret makes the one long-lived token Secret of the reader, by
// name, so re-runs reuse it rather than pile up tokens. One left from a
// deleted and recreated ServiceAccount is replaced: the token controller
// would delete it anyway, and its token no longer authenticates.
func ensureTokenSecret(ctx context.Context, client kubernetes.Interface, sa *corev1.ServiceAccount) (string, error) {
	secrets := client.CoreV1().Secrets(Namespace)
	cur, err := secrets.Get(ctx, TokenSecret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return "", fmt.Errorf("reading token secret %s/%s: %w", Namespace, TokenSecret, err)
	case cur.Type != corev1.SecretTypeServiceAccountToken || cur.Annotations[corev1.ServiceAccountNameKey] != ServiceAccount:
		return "", fmt.Errorf("secret %s/%s exists but is no token of service account %s (type %s): delete it first", Namespace, TokenSecret, ServiceAccount, cur.Type)
	case cur.Annotations[corev1.ServiceAccountUIDKey] == "" || cur.Annotations[corev1.ServiceAccountUIDKey] == string(sa.UID):
		return TokenReused, nil
	default:
		if err := secrets.Delete(ctx, TokenSecret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("replacing token secret %s/%s of a deleted service account: %w", Namespace, TokenSecret, err)
		}
	}
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: TokenSecret, Namespace: Namespace, Labels: maps.Clone(managedBy),
			Annotations: map[string]string{corev1.ServiceAccountNameKey: ServiceAccount},
		},
		Type: corev1.SecretTypeServiceAccountToken,
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating token secret %s/%s: %w", Namespace, TokenSecret, err)
	}
	return TokenCreated, nil
}

// waitForToken polls the token Secret until kube-controller-manager's token
// controller has put the token and the cluster CA into it.
func (m *Manager) waitForToken(ctx context.Context, client kubernetes.Interface) (credentials, error) {
	deadline := time.Now().Add(m.timeout)
	for {
		s, err := client.CoreV1().Secrets(Namespace).Get(ctx, TokenSecret, metav1.GetOptions{})
		if err != nil {
			return credentials{}, fmt.Errorf("reading token secret %s/%s: %w", Namespace, TokenSecret, err)
		}
		c := credentials{ca: s.Data[corev1.ServiceAccountRootCAKey], token: s.Data[corev1.ServiceAccountTokenKey]}
		if len(c.ca) > 0 && len(c.token) > 0 {
			return c, nil
		}
		if time.Now().After(deadline) {
			return credentials{}, fmt.Errorf("token secret %s/%s has no token and CA after %s: is kube-controller-manager (its token controller) running?", Namespace, TokenSecret, m.timeout)
		}
		select {
		case <-ctx.Done():
			return credentials{}, fmt.Errorf("waiting for the token of %s/%s: %w", Namespace, TokenSecret, context.Cause(ctx))
		case <-time.After(m.poll):
		}
	}
}

// removeLegacyReader deletes the reader objects an earlier meshctl made
// under its old names, each only if meshctl's label says meshctl made it.
// Its remote secrets then carry a token that no longer authenticates, and
// Ensure rewrites them with the new reader's.
func removeLegacyReader(ctx context.Context, client kubernetes.Interface) error {
	ours := func(labels map[string]string) bool {
		return labels[managedByKey] == managedBy[managedByKey]
	}
	del := func(kind, name string, get func() (map[string]string, error), del func() error) error {
		labels, err := get()
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("reading %s %s: %w", kind, name, err)
		case !ours(labels):
			return nil
		}
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting meshctl's old %s %s: %w", kind, name, err)
		}
		return nil
	}
	l := legacyReader
	if err := del("token secret", Namespace+"/"+l.tokenSecret, func() (map[string]string, error) {
		return labelsOf(client.CoreV1().Secrets(Namespace).Get(ctx, l.tokenSecret, metav1.GetOptions{}))
	}, func() error {
		return client.CoreV1().Secrets(Namespace).Delete(ctx, l.tokenSecret, metav1.DeleteOptions{})
	}); err != nil {
		return err
	}
	if err := del("service account", Namespace+"/"+l.serviceAccount, func() (map[string]string, error) {
		return labelsOf(client.CoreV1().ServiceAccounts(Namespace).Get(ctx, l.serviceAccount, metav1.GetOptions{}))
	}, func() error {
		return client.CoreV1().ServiceAccounts(Namespace).Delete(ctx, l.serviceAccount, metav1.DeleteOptions{})
	}); err != nil {
		return err
	}
	if err := del("cluster role binding", l.clusterRole, func() (map[string]string, error) {
		return labelsOf(client.RbacV1().ClusterRoleBindings().Get(ctx, l.clusterRole, metav1.GetOptions{}))
	}, func() error {
		return client.RbacV1().ClusterRoleBindings().Delete(ctx, l.clusterRole, metav1.DeleteOptions{})
	}); err != nil {
		return err
	}
	return del("cluster role", l.clusterRole, func() (map[string]string, error) {
		return labelsOf(client.RbacV1().ClusterRoles().Get(ctx, l.clusterRole, metav1.GetOptions{}))
	}, func() error {
		return client.RbacV1().ClusterRoles().Delete(ctx, l.clusterRole, metav1.DeleteOptions{})
	})
}

// labelsOf is an object's labels, or the error of reading it.
func labelsOf[T metav1.Object](o T, err error) (map[string]string, error) {
	if err != nil {
		return nil, err
	}
	return o.GetLabels(), nil
}
