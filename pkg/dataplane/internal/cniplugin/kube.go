package cniplugin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// lookupPod fetches the pod and its namespace, the inputs of the meshed
// decision. The plugin runs on the host, so it uses the kubeconfig
// install-cni wrote rather than in-cluster config.
func lookupPod(ctx context.Context, kubeconfig, ns, name string) (*corev1.Pod, *corev1.Namespace, error) {
	cs, err := kubeclient.FromFile(kubeconfig, "").Kubernetes()
	if err != nil {
		return nil, nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("getting pod %s/%s: %w", ns, name, err)
	}
	namespace, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("getting namespace %s: %w", ns, err)
	}
	return pod, namespace, nil
}
