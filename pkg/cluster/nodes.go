package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// NodeStatus is one Kubernetes node as status reports it.
type NodeStatus struct {
	Name     string   `json:"name"`
	Role     string   `json:"role"`
	Ready    bool     `json:"ready"`
	IPs      []string `json:"ips,omitempty"`
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	Version  string   `json:"version,omitempty"`
}

// apiNodeReader reads nodes with client-go.
type apiNodeReader struct{}

func (apiNodeReader) Nodes(ctx context.Context, kubeconfig []byte) ([]NodeStatus, error) {
	kg := kubeclient.FromBytes(kubeconfig, "")
	if _, err := kg.RESTConfig(); err != nil {
		return nil, fmt.Errorf("parsing kubeconfig: %w", err)
	}
	cs, err := kg.Kubernetes()
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return NodeStatuses(list.Items), nil
}

// NodeStatuses summarizes Kubernetes nodes.
func NodeStatuses(items []corev1.Node) []NodeStatus {
	out := make([]NodeStatus, 0, len(items))
	for _, n := range items {
		s := NodeStatus{Name: n.Name, Role: "worker", PodCIDRs: n.Spec.PodCIDRs, Version: n.Status.NodeInfo.KubeletVersion}
		if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; ok {
			s.Role = "control-plane"
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				s.Ready = c.Status == corev1.ConditionTrue
			}
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				s.IPs = append(s.IPs, a.Address)
			}
		}
		out = append(out, s)
	}
	return out
}

// System lists the workloads of kube-system that carry pods' traffic and
// are not ready: a DaemonSet (kindnet, kube-proxy) without a ready pod on
// every node it runs on, a Deployment (CoreDNS) without a ready pod. A
// restarted node answers, and reports itself Ready, well before them:
// measured after a node's restart, its API server answered 8 s after the
// start and CoreDNS had no ready pod until 40 s, names not resolving
// meanwhile. Pods are judged themselves, not their controllers' status,
// which the controller manager (restarting with the node) updates last;
// and a pod on a node of started (when its container last started) counts
// only if its containers started since: until the kubelet reports, the
// API server still shows the pod as it was before the restart.
func (apiNodeReader) System(ctx context.Context, kubeconfig []byte, started map[string]time.Time) ([]string, error) {
	cs, err := kubeclient.FromBytes(kubeconfig, "").Kubernetes()
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	ns := metav1.NamespaceSystem
	dss, err := cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing kube-system's DaemonSets: %w", err)
	}
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing kube-system's Deployments: %w", err)
	}
	rss, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing kube-system's ReplicaSets: %w", err)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing kube-system's pods: %w", err)
	}
	deploymentOf := map[string]string{} // ReplicaSet → Deployment
	for _, rs := range rss.Items {
		if o := metav1.GetControllerOf(&rs); o != nil && o.Kind == "Deployment" {
			deploymentOf[rs.Name] = o.Name
		}
	}
	var out []string
	ready := map[string]int{} // "DaemonSet/name", "Deployment/name" → ready pods
	for _, pod := range pods.Items {
		o := metav1.GetControllerOf(&pod)
		if o == nil {
			continue
		}
		// The control plane's static pods (owned by their node) are not
		// judged by their Ready condition: kubeadm gives them startup
		// probes that first look 10 s after they start, long after they
		// serve. The API server answering, and the leases below, say
		// more.
		if !podReadySince(pod, started[pod.Spec.NodeName]) {
			continue
		}
		switch o.Kind {
		case "DaemonSet":
			ready["DaemonSet/"+o.Name]++
		case "ReplicaSet":
			if d, ok := deploymentOf[o.Name]; ok {
				ready["Deployment/"+d]++
			}
		}
	}
	for _, ds := range dss.Items {
		want := int(ds.Status.DesiredNumberScheduled)
		if got := ready["DaemonSet/"+ds.Name]; got < want {
			out = append(out, fmt.Sprintf("DaemonSet kube-system/%s: %d of %d pods ready", ds.Name, got, want))
		}
	}
	for _, d := range deps.Items {
		// One ready pod serves (CoreDNS's Service sends only to ready
		// ones); a Deployment scaled to zero asks for none.
		if d.Spec.Replicas != nil && *d.Spec.Replicas > 0 && ready["Deployment/"+d.Name] == 0 {
			out = append(out, fmt.Sprintf("Deployment kube-system/%s: none of %d pods ready", d.Name, *d.Spec.Replicas))
		}
	}
	// After a restart the controller manager and the scheduler run, and are
	// Ready, but wait for their previous incarnation's leader lease to
	// expire (15 s) before they act: no pod is scheduled, no namespace
	// gets its ServiceAccount, until they renew it.
	var latest time.Time
	for _, t := range started {
		if t.After(latest) {
			latest = t
		}
	}
	if !latest.IsZero() {
		for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
			l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				out = append(out, fmt.Sprintf("%s has not taken its leader lease yet", name))
			case err != nil:
				return nil, fmt.Errorf("reading lease kube-system/%s: %w", name, err)
			case l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(latest.Truncate(time.Second)):
				out = append(out, fmt.Sprintf("%s has not renewed its leader lease since the node started", name))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// podReadySince says whether pod is Ready and, when its node started at a
// known time, whether each of its containers has run since then (the
// kubelet's report after the restart, not the one before it).
func podReadySince(pod corev1.Pod, nodeStarted time.Time) bool {
	ready := false
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready || nodeStarted.IsZero() {
		return ready
	}
	// The API's times have whole seconds.
	since := nodeStarted.Truncate(time.Second)
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Running == nil || c.State.Running.StartedAt.Time.Before(since) {
			return false
		}
	}
	return len(pod.Status.ContainerStatuses) > 0
}
