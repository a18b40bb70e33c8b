package testenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// loadBalancerPoll is how often LoadBalancer looks at the Service: short,
// because the code under test is waiting for the address.
const loadBalancerPoll = 50 * time.Millisecond

// LoadBalancer stands in for a cloud's load-balancer controller, which an
// Env does not run (it has no controller-manager, let alone a cloud): until
// ctx ends, whenever the Service namespace/name exists without an address, it
// sets the Service's status.loadBalancer.ingress to ip. The Service may be
// created before or after the call; an address already there is left alone.
//
// It blocks, so run it in a goroutine, and wait for it before the test ends
// if the test must not outlive it. It returns nil when ctx ends, or an error
// at once when cfg cannot make a client. Failed reads and updates (the
// Service not there yet, an update conflict) are retried on the next poll.
func LoadBalancer(ctx context.Context, cfg *rest.Config, namespace, name, ip string) error {
	cs, err := kubeclient.FromConfig(cfg).Kubernetes()
	if err != nil {
		return fmt.Errorf("testenv load balancer for service %s/%s: %w", namespace, name, err)
	}
	tick := time.NewTicker(loadBalancerPoll)
	defer tick.Stop()
	for {
		svc, err := cs.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && len(svc.Status.LoadBalancer.Ingress) == 0 {
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
			_, _ = cs.CoreV1().Services(namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
