package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// FieldManager owns, in server-side apply, the fields meshctl sets.
const FieldManager = "meshctl"

// kube is one cluster's API.
type kube struct {
	dyn dynamic.Interface
	cs  kubernetes.Interface
}

func newKube(cfg *rest.Config) (*kube, error) {
	g := kubeclient.FromConfig(cfg)
	dyn, err := g.Dynamic()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cs, err := g.Kubernetes()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &kube{dyn: dyn, cs: cs}, nil
}

// applyAll server-side applies objs in order. Applying what is already
// there changes nothing (not even resourceVersion), which makes reruns
// free; fields other managers set (allocated node ports, MetalLB's
// statuses) are left alone.
func (k *kube) applyAll(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		// every kind here pluralizes regularly (services, ipaddresspools,
		// customresourcedefinitions, …), which spares a discovery round trip
		gvr, _ := meta.UnsafeGuessKindToResource(o.GroupVersionKind())
		var ri dynamic.ResourceInterface = k.dyn.Resource(gvr)
		if ns := o.GetNamespace(); ns != "" {
			ri = k.dyn.Resource(gvr).Namespace(ns)
		}
		data, err := o.MarshalJSON()
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		force := true
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: FieldManager, Force: &force}); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), qualified(o), err)
		}
	}
	return nil
}

// deleteManaged deletes the ValidatingWebhookConfiguration name if meshctl
// applied it (it carries ManagedByLabel); one of another owner's, or none,
// is left as it is.
func (k *kube) deleteManaged(ctx context.Context, name string) error {
	api := k.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	w, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if w.Labels[ManagedByLabel] != FieldManager {
		return nil
	}
	err = api.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &w.UID}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func qualified(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// retry calls f until it succeeds or ctx ends; the error is f's last.
func (k *kube) retry(ctx context.Context, poll time.Duration, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(poll):
		}
	}
}

// waitMetalLB waits until the controller Deployment is available and
// updated, and the speaker runs on every node.
func (k *kube) waitMetalLB(ctx context.Context, poll time.Duration) error {
	return k.retry(ctx, poll, func() error {
		d, err := k.cs.AppsV1().Deployments(MetalLBNamespace).Get(ctx, "controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		// updated too: a rerun that changed the controller waits for its
		// rollout, as it does for the speakers'
		if d.Status.ObservedGeneration < d.Generation || d.Status.AvailableReplicas < 1 || d.Status.UpdatedReplicas < replicas(d.Spec.Replicas) {
			return fmt.Errorf("deployment %s/controller: %d of %d replicas available, %d updated", MetalLBNamespace,
				d.Status.AvailableReplicas, replicas(d.Spec.Replicas), d.Status.UpdatedReplicas)
		}
		ds, err := k.cs.AppsV1().DaemonSets(MetalLBNamespace).Get(ctx, "speaker", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled == 0 ||
			st.NumberAvailable < st.DesiredNumberScheduled || st.UpdatedNumberScheduled < st.DesiredNumberScheduled {
			return fmt.Errorf("daemonset %s/speaker: %d of %d pods available", MetalLBNamespace, st.NumberAvailable, st.DesiredNumberScheduled)
		}
		return nil
	})
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// errNoAddress is waitAddress's error while MetalLB has not answered.
var errNoAddress = errors.New("no load-balancer ingress yet")

// waitAddress waits for the external addresses of the Service name in
// istio-system.
func (k *kube) waitAddress(ctx context.Context, poll time.Duration, name string) ([]string, error) {
	var addrs []string
	err := k.retry(ctx, poll, func() error {
		svc, err := k.cs.CoreV1().Services(GatewayNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		addrs = addrs[:0]
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				addrs = append(addrs, in.IP)
			}
		}
		if len(addrs) == 0 {
			var events []string
			if evs, err := k.cs.CoreV1().Events(GatewayNamespace).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.name=" + name + ",type=Warning"}); err == nil {
				for _, e := range evs.Items {
					events = append(events, e.Reason+": "+e.Message)
				}
			}
			if len(events) > 0 {
				return fmt.Errorf("%w (events: %s)", errNoAddress, strings.Join(events, "; "))
			}
			return errNoAddress
		}
		return nil
	})
	return addrs, err
}
