// Package existing checks and claims existing clusters — the ones a
// topology names with meta.kubeconfig, which meshctl uses as they are and
// never creates or deletes: it reads their kubeconfigs, asks their API
// servers what meshctl needs to know (version, access, subnets) and writes
// the claim that tells other environments the cluster is taken.
package existing

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// MinKubernetesVersion is the oldest existing cluster meshctl accepts: the
// oldest Kubernetes release Istio's supported versions still run on.
const MinKubernetesVersion = "v1.28.0"

// Timeout bounds each existing cluster's checks: an API server that
// does not answer in this time is reported, not waited for.
const Timeout = 20 * time.Second

// istioNamespace is where meshctl installs into (the cacerts Secret).
const istioNamespace = "istio-system"

// access is what meshctl does in an existing cluster, checked with
// SelfSubjectAccessReviews before anything is changed anywhere.
var access = []authorizationv1.ResourceAttributes{
	{Verb: "list", Resource: "nodes"},
	{Verb: "get", Resource: "services", Namespace: "default"},
	{Verb: "create", Resource: "namespaces"},
	{Verb: "get", Resource: "configmaps", Namespace: model.ClaimNamespace},
	{Verb: "create", Resource: "configmaps", Namespace: model.ClaimNamespace},
	{Verb: "delete", Resource: "configmaps", Namespace: model.ClaimNamespace},
	{Verb: "create", Resource: "secrets", Namespace: istioNamespace},
	{Verb: "update", Resource: "secrets", Namespace: istioNamespace},
	{Verb: "delete", Resource: "secrets", Namespace: istioNamespace},
}

// Kubeconfig reads the selected context of an existing cluster's
// kubeconfig into a self-contained kubeconfig of that context alone, named
// after the mesh cluster like a kind cluster's: certificate files are
// embedded (relative paths resolved against the kubeconfig's directory), so
// the copy meshctl hands to other steps works from anywhere.
func Kubeconfig(c model.ClusterPlan) (*clientcmdapi.Config, error) {
	// Read first: LoadFromFile says less about a permission problem.
	if _, err := os.ReadFile(c.Kubeconfig); err != nil {
		return nil, fmt.Errorf("cannot read kubeconfig %s (meta.kubeconfig): %w", c.Kubeconfig, err)
	}
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s (meta.kubeconfig) is not a kubeconfig: %w", c.Kubeconfig, err)
	}
	name := c.Context
	if name == "" {
		name = cfg.CurrentContext
	}
	kctx, ok := cfg.Contexts[name]
	switch {
	case name == "":
		return nil, fmt.Errorf("kubeconfig %s has no current-context: name one with meta.context (it has %s)", c.Kubeconfig, contextNames(cfg))
	case !ok:
		return nil, fmt.Errorf("kubeconfig %s has no context %q (it has %s)", c.Kubeconfig, name, contextNames(cfg))
	}
	cl := cfg.Clusters[kctx.Cluster]
	if cl == nil {
		return nil, fmt.Errorf("kubeconfig %s: context %q names cluster %q, which it does not define", c.Kubeconfig, name, kctx.Cluster)
	}
	user := clientcmdapi.NewAuthInfo() // no user: anonymous, as kubectl does
	if kctx.AuthInfo != "" {
		if user = cfg.AuthInfos[kctx.AuthInfo]; user == nil {
			return nil, fmt.Errorf("kubeconfig %s: context %q names user %q, which it does not define", c.Kubeconfig, name, kctx.AuthInfo)
		}
	}
	out := clientcmdapi.NewConfig()
	out.Clusters[c.Name] = cl.DeepCopy()
	out.AuthInfos[c.Name] = user.DeepCopy()
	out.AuthInfos[c.Name].LocationOfOrigin = c.Kubeconfig
	out.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: c.Name, Namespace: kctx.Namespace}
	out.CurrentContext = c.Name
	if tf := out.AuthInfos[c.Name].TokenFile; tf != "" && !filepath.IsAbs(tf) {
		out.AuthInfos[c.Name].TokenFile = filepath.Join(filepath.Dir(c.Kubeconfig), tf)
	}
	if err := clientcmdapi.FlattenConfig(out); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: context %q: embedding certificate files: %w", c.Kubeconfig, name, err)
	}
	return out, nil
}

func contextNames(cfg *clientcmdapi.Config) string {
	var names []string
	for n := range cfg.Contexts {
		names = append(names, fmt.Sprintf("%q", n))
	}
	if len(names) == 0 {
		return "no contexts"
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// contextName is the user's name for an existing cluster's context, for messages.
func contextName(c model.ClusterPlan) string {
	if c.Context != "" {
		return c.Context
	}
	return "(current-context)"
}

// Client connects to an existing cluster.
func Client(c model.ClusterPlan) (kubernetes.Interface, *rest.Config, error) {
	cfg, err := Kubeconfig(c)
	if err != nil {
		return nil, nil, err
	}
	kg := kubeclient.FromAPIConfig(*cfg, "", kubeclient.WithTimeout(Timeout))
	rc, err := kg.RESTConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: context %s: %w", c.Kubeconfig, contextName(c), err)
	}
	cs, err := kg.Kubernetes()
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: context %s: %w", c.Kubeconfig, contextName(c), err)
	}
	return cs, rc, nil
}

// Loopback tells whether a server URL's host is a loopback address.
func Loopback(server string) bool {
	u, err := url.Parse(server)
	if err != nil {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(u.Hostname())
	return err == nil && a.IsLoopback()
}

// apiError says what a failed first request to an API server means.
func apiError(c model.ClusterPlan, server string, err error) error {
	switch {
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("API server %s rejected the credentials of context %s (401 Unauthorized): they are wrong or expired", server, contextName(c))
	case apierrors.IsForbidden(err):
		return fmt.Errorf("API server %s: context %s is not allowed to read the server version: %w", server, contextName(c), err)
	}
	return fmt.Errorf("API server %s (context %s) is unreachable: %w", server, contextName(c), err)
}

// Check checks one existing cluster — kubeconfig readable, context present,
// API server reachable, credentials accepted and allowed what meshctl does,
// Kubernetes recent enough, not claimed by another environment — and
// returns what it found: the plan completed with the subnets and IP family
// the API server reported, and the Discovery that says from where.
func Check(ctx context.Context, env string, c model.ClusterPlan) (model.ClusterState, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	cs, rc, err := Client(c)
	if err != nil {
		return model.ClusterState{}, err
	}
	info, err := cs.Discovery().ServerVersion()
	if err != nil {
		return model.ClusterState{}, apiError(c, rc.Host, err)
	}
	have, err := utilversion.ParseGeneric(info.GitVersion)
	if err != nil {
		return model.ClusterState{}, fmt.Errorf("API server %s reports an unreadable version %q: %w", rc.Host, info.GitVersion, err)
	}
	if have.LessThan(utilversion.MustParseGeneric(MinKubernetesVersion)) {
		return model.ClusterState{}, fmt.Errorf("API server %s runs Kubernetes %s; meshctl needs %s or newer", rc.Host, info.GitVersion, MinKubernetesVersion)
	}
	if err := checkAccess(ctx, cs, c); err != nil {
		return model.ClusterState{}, err
	}
	if err := CheckClaim(ctx, cs, env, c.Name); err != nil {
		return model.ClusterState{}, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return model.ClusterState{}, fmt.Errorf("listing nodes: %w", err)
	}
	d := &model.Discovery{Server: rc.Host, Version: info.GitVersion, Nodes: len(nodes.Items)}
	var podCIDRs []string
	seen := map[string]bool{}
	for _, n := range nodes.Items {
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, s := range cidrs {
			if !seen[s] {
				seen[s] = true
				podCIDRs = append(podCIDRs, s)
			}
		}
	}
	sort.Strings(podCIDRs)
	if c.PodSubnets, d.PodSubnetsFrom, err = reconcile("podSubnet", c.PodSubnets, podCIDRs, fmt.Sprintf("nodes' spec.podCIDRs (%d nodes)", len(nodes.Items)),
		"unknown: no node has spec.podCIDRs (the cluster's CNI assigns pod addresses itself); state podSubnet in the topology to declare them"); err != nil {
		return model.ClusterState{}, err
	}
	svc, from, inferred, err := serviceCIDRs(ctx, cs)
	if err != nil {
		return model.ClusterState{}, err
	}
	if inferred && len(c.ServiceSubnets) > 0 {
		// An inferred range is an upper bound: a stated one need
		// only hold the kubernetes Service's address, and is exact.
		hosts := make([]string, len(svc))
		for i, s := range svc {
			pr := netip.MustParsePrefix(s)
			hosts[i] = netip.PrefixFrom(pr.Addr().Next(), pr.Addr().BitLen()).String()
		}
		svc, from = hosts, "the kubernetes Service's ClusterIP"
	}
	d.ServiceSubnetsInferred = inferred && len(c.ServiceSubnets) == 0
	if c.ServiceSubnets, d.ServiceSubnetsFrom, err = reconcile("svcSubnet", c.ServiceSubnets, svc, from, ""); err != nil {
		return model.ClusterState{}, err
	}
	c.IPFamily = model.FamilyOf(append(append([]string{}, c.PodSubnets...), c.ServiceSubnets...))
	return model.ClusterState{ClusterPlan: c, Discovery: d}, nil
}

// checkAccess asks the API server whether the context may do what meshctl
// does there, and names everything it may not.
func checkAccess(ctx context.Context, cs kubernetes.Interface, c model.ClusterPlan) error {
	var denied []string
	for _, ra := range access {
		ra := ra
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("checking access (SelfSubjectAccessReview): %w", err)
		}
		if !r.Status.Allowed {
			what := ra.Verb + " " + ra.Resource
			if ra.Namespace != "" {
				what += " in " + ra.Namespace
			}
			denied = append(denied, what)
		}
	}
	if len(denied) > 0 {
		return fmt.Errorf("context %s is not authorized to %s (meshctl records the cluster in %s and installs istio-system/cacerts there; cluster-admin can)", contextName(c), strings.Join(denied, ", "), model.ClaimNamespace)
	}
	return nil
}

// CheckClaim refuses a cluster another environment uses.
func CheckClaim(ctx context.Context, cs kubernetes.Interface, env, name string) error {
	cm, err := cs.CoreV1().ConfigMaps(model.ClaimNamespace).Get(ctx, model.ClaimName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s/%s: %w", model.ClaimNamespace, model.ClaimName, err)
	case cm.Data["env"] != env:
		return fmt.Errorf("is used by meshctl environment %q (as cluster %q, says %s/%s): run `meshctl down --env %s` first, or use that environment", cm.Data["env"], cm.Data["cluster"], model.ClaimNamespace, model.ClaimName, cm.Data["env"])
	case cm.Data["cluster"] != name:
		return fmt.Errorf("is already cluster %q of environment %q (says %s/%s): one cluster cannot be two", cm.Data["cluster"], env, model.ClaimNamespace, model.ClaimName)
	}
	return nil
}

// serviceCIDRs reads the cluster's service CIDRs from the ServiceCIDR API
// (networking.k8s.io/v1, Kubernetes 1.33+), whose "kubernetes" object the
// API server creates from its --service-cluster-ip-range. Older clusters
// do not serve it and the flag itself is not readable through the API, so
// the range is inferred from the kubernetes Service, which holds its first
// address.
func serviceCIDRs(ctx context.Context, cs kubernetes.Interface) (cidrs []string, from string, inferred bool, err error) {
	sc, err := cs.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	switch {
	case err == nil && len(sc.Spec.CIDRs) > 0:
		return sc.Spec.CIDRs, "ServiceCIDR kubernetes (networking.k8s.io/v1)", false, nil
	case err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
		return nil, "", false, fmt.Errorf("reading ServiceCIDR kubernetes: %w", err)
	}
	svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, "", false, fmt.Errorf("no ServiceCIDR kubernetes, and reading Service default/kubernetes: %w", err)
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, "", false, fmt.Errorf("Service default/kubernetes has an unreadable ClusterIP %q", s)
		}
		cidrs = append(cidrs, model.InferServiceCIDR(ip).String())
	}
	if len(cidrs) == 0 {
		return nil, "", false, fmt.Errorf("no ServiceCIDR kubernetes, and Service default/kubernetes has no ClusterIP")
	}
	return cidrs, fmt.Sprintf("inferred from Service default/kubernetes ClusterIP %s (the range's first address; the ServiceCIDR API is not served): an upper bound", strings.Join(ips, ",")), true, nil
}

// reconcile checks subnets the topology states against the discovered ones
// and picks what the plan keeps: stated ones must contain every discovered
// one (a node's /24 inside the cluster's /16, say), and are kept, being the
// whole range; otherwise the discovered ones.
func reconcile(field string, stated, found []string, foundFrom, noneFrom string) ([]string, string, error) {
	switch {
	case len(found) == 0 && len(stated) > 0:
		return stated, "topology (the cluster reports none to check it against)", nil
	case len(found) == 0:
		return nil, noneFrom, nil
	case len(stated) == 0:
		return found, foundFrom, nil
	}
	st := model.Prefixes(stated)
	for _, f := range found {
		fp, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, "", fmt.Errorf("%s: the cluster reports an unreadable CIDR %q", field, f)
		}
		inside := false
		for _, s := range st {
			inside = inside || (s.Bits() <= fp.Bits() && s.Contains(fp.Addr()))
		}
		if !inside {
			return nil, "", fmt.Errorf("%s %s stated in the topology does not contain %s, which the cluster reports (%s): fix or remove it", field, strings.Join(stated, ","), f, foundFrom)
		}
	}
	return stated, "topology, checked against " + foundFrom, nil
}

// Claim writes the claim into an existing cluster (creating the
// meshctl-system namespace, labelled as meshctl's, if missing): which
// environment uses it, as which cluster.
func Claim(ctx context.Context, cs kubernetes.Interface, rec model.Record) error {
	c := rec.Cluster
	managed := map[string]string{model.ManagedByLabel: model.ManagedByValue}
	// A namespace that exists already is not labelled: it is not
	// meshctl's to delete on down.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: model.ClaimNamespace, Labels: managed}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		cur, err := cs.CoreV1().Namespaces().Get(ctx, model.ClaimNamespace, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading namespace %s: %w", model.ClaimNamespace, err)
		}
		if cur.DeletionTimestamp != nil {
			return fmt.Errorf("namespace %s is still being deleted (by an earlier `meshctl down`): rerun when it is gone", model.ClaimNamespace)
		}
	} else if err != nil {
		return fmt.Errorf("creating namespace %s: %w", model.ClaimNamespace, err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: model.ClaimName, Namespace: model.ClaimNamespace, Labels: managed},
		Data:       map[string]string{"env": rec.Env, "cluster": c.Name, "meshctlVersion": rec.Version, "createdAt": rec.CreatedAt.Format(time.RFC3339)},
	}
	cms := cs.CoreV1().ConfigMaps(model.ClaimNamespace)
	cur, err := cms.Get(ctx, model.ClaimName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	case err == nil:
		// Keep createdAt: the claim is as old as the first up.
		if at := cur.Data["createdAt"]; at != "" {
			cm.Data["createdAt"] = at
		}
		cm.ResourceVersion = cur.ResourceVersion
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing %s/%s: %w", model.ClaimNamespace, model.ClaimName, err)
	}
	return nil
}
