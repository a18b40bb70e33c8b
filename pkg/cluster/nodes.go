package cluster

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
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
// are not ready: a DaemonSet (kindnet, kube-proxy) not ready on every node
// it runs on, a Deployment (CoreDNS) without a ready pod. A restarted node
// answers, and reports itself Ready, well before them: measured after a
// node's restart, its API server answered 8 s after the start and CoreDNS
// had no ready pod until 40 s, names not resolving meanwhile.
func (apiNodeReader) System(ctx context.Context, kubeconfig []byte) ([]string, error) {
	cs, err := kubeclient.FromBytes(kubeconfig, "").Kubernetes()
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	var out []string
	dss, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing kube-system's DaemonSets: %w", err)
	}
	for _, ds := range dss.Items {
		if want := ds.Status.DesiredNumberScheduled; ds.Status.NumberReady < want {
			out = append(out, fmt.Sprintf("DaemonSet kube-system/%s: %d of %d pods ready", ds.Name, ds.Status.NumberReady, want))
		}
	}
	deps, err := cs.AppsV1().Deployments(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing kube-system's Deployments: %w", err)
	}
	for _, d := range deps.Items {
		// One ready pod serves (CoreDNS's Service sends only to ready
		// ones); a Deployment scaled to zero asks for none.
		if d.Spec.Replicas != nil && *d.Spec.Replicas > 0 && d.Status.ReadyReplicas == 0 {
			out = append(out, fmt.Sprintf("Deployment kube-system/%s: none of %d pods ready", d.Name, *d.Spec.Replicas))
		}
	}
	slices.Sort(out)
	return out, nil
}
