// Package uninstall removes from a cluster everything meshctl labelled as
// its own, the way down empties a cluster it keeps.
package uninstall

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// Labelled deletes from a cluster every object labelled
// app.kubernetes.io/managed-by=meshctl — the cacerts Secret, the claim, and
// whatever later steps label the same way — and returns them as
// "resource/namespace/name". It asks discovery for every resource type
// rather than keeping a list, so that a step added later cannot leave its
// objects behind. Namespaced objects go first and namespaces last, so that
// what is reported deleted was deleted, not left to the namespace
// controller.
func Labelled(ctx context.Context, rc *rest.Config) ([]string, error) {
	// Listing every type includes deprecated ones (v1 Endpoints): their
	// warnings would only puzzle a user who ran down.
	kg := kubeclient.FromConfig(rc, kubeclient.WithoutWarnings())
	dc, err := kg.Discovery()
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	dyn, err := kg.Dynamic()
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	lists, err := discovery.ServerPreferredResources(dc)
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		// A failed aggregated API (metrics, say) holds nothing of
		// meshctl's; any other failure means the list is unknown.
		return nil, fmt.Errorf("listing resource types: %w", err)
	}
	type res struct {
		gvr        schema.GroupVersionResource
		namespaced bool
	}
	var types []res
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "delete") {
				continue
			}
			types = append(types, res{gv.WithResource(r.Name), r.Namespaced})
		}
	}
	// Namespaced first, then cluster-scoped, namespaces last.
	rank := func(r res) int {
		switch {
		case r.namespaced:
			return 0
		case r.gvr.Group == "" && r.gvr.Resource == "namespaces":
			return 2
		}
		return 1
	}
	sort.SliceStable(types, func(i, j int) bool { return rank(types[i]) < rank(types[j]) })
	selector := metav1.ListOptions{LabelSelector: model.ManagedByLabel + "=" + model.ManagedByValue}
	// Every type is listed at once (some 90 on a kind cluster with the
	// dataplane: one after another they took 3 s of round trips), then
	// what was found is deleted in rank order.
	found := make([][]unstructured.Unstructured, len(types))
	idx := make([]int, len(types))
	for i := range idx {
		idx[i] = i
	}
	if err := parallel.ForEach(idx, func(i int) error {
		list, err := dyn.Resource(types[i].gvr).List(ctx, selector)
		if err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				return nil
			}
			return fmt.Errorf("listing %s labelled %s: %w", types[i].gvr.Resource, selector.LabelSelector, err)
		}
		found[i] = list.Items
		return nil
	}); err != nil {
		return nil, err
	}
	var deleted []string
	for i, t := range types {
		for _, o := range found[i] {
			ri := dyn.Resource(t.gvr).Namespace(o.GetNamespace())
			bg := metav1.DeletePropagationBackground
			err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg})
			if apierrors.IsNotFound(err) {
				// Gone since it was listed: what a controller derives from
				// an object deleted before it (the Endpoints of a Service).
				continue
			}
			if err != nil {
				return deleted, fmt.Errorf("deleting %s %s: %w", t.gvr.Resource, objectName(o.GetNamespace(), o.GetName()), err)
			}
			deleted = append(deleted, t.gvr.Resource+"/"+objectName(o.GetNamespace(), o.GetName()))
		}
	}
	return deleted, nil
}

func objectName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}
