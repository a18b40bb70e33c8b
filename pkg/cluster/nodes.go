package cluster

import (
	"context"
	"fmt"

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
