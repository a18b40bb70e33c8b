package meshtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"

	"github.com/onsi/ginkgo/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Echo ports: the pod listens on EchoPort, its Service forwards
// EchoServicePort to it.
const (
	EchoPort        = 8080
	EchoServicePort = 80
)

// echoReadyWait bounds DeployEcho's wait for the pod to be Ready: generous,
// for CI machines that run several kind clusters at once.
const echoReadyWait = 5 * time.Minute

// Echo is DeployEcho's workload in one cluster: a pod that answers HTTP on
// EchoPort with "meshtest-echo cluster=<cluster> pod=<pod>", so that whoever
// reaches it knows whom it reached, and a Service in front of it. Its pod has
// sh and nc, so it is also where Reach sends from.
type Echo struct {
	Cluster   *Cluster
	Namespace string
	Name      string // of the Deployment and the Service
	Pod       string
	PodIP     string
	ServiceIP string
	// PodIPs and ServiceIPs hold every family's address on a dual-stack
	// cluster (the Service prefers dual stack), PodIP and ServiceIP first.
	PodIPs     []string
	ServiceIPs []string
}

func (e *Echo) String() string {
	return fmt.Sprintf("pod %s/%s/%s", e.Cluster.Name, e.Namespace, e.Pod)
}

// Echoes are an echo workload's instances, one per cluster, in the
// environment's cluster order.
type Echoes []*Echo

// In returns the instance in the named cluster; an unknown name fails the
// spec with the names there are.
func (es Echoes) In(cluster string) *Echo {
	ginkgo.GinkgoHelper()
	var known []string
	for _, e := range es {
		if e.Cluster.Name == cluster || e.Cluster.KindName == cluster {
			return e
		}
		known = append(known, e.Cluster.Name)
	}
	ginkgo.Fail(fmt.Sprintf("meshtest: no echo in cluster %q (there is one in %s)", cluster, strings.Join(known, ", ")))
	return nil
}

// DeployEcho deploys the echo workload name (a Deployment of one pod and a
// Service) into namespace in every cluster at once, and waits until every
// pod is Ready. The image is -meshtest.echo-image (default
// meshctl/busybox:latest), which the nodes must already have or be able to
// pull.
func (e *Env) DeployEcho(ctx context.Context, namespace, name string) Echoes {
	ginkgo.GinkgoHelper()
	out := make(Echoes, len(e.clusters))
	err := parallel.ForEach(indexes(len(e.clusters)), func(i int) error {
		var err error
		out[i], err = e.clusters[i].deployEcho(ctx, namespace, name, e.desc.EchoImage)
		return err
	})
	if err != nil {
		ginkgo.Fail(err.Error())
	}
	return out
}

func echoManifests(cluster, name, image string) string {
	// busybox httpd, not nc -l: it serves each connection and survives the
	// ones that hang up early (readiness probes, port scans).
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
  labels: {app: %[1]s, app.kubernetes.io/managed-by: meshtest}
spec:
  replicas: 1
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: echo
        image: %[3]s
        imagePullPolicy: IfNotPresent
        env:
        - {name: CLUSTER, value: %[2]q}
        command:
        - sh
        - -c
        - mkdir -p /www && echo "meshtest-echo cluster=$CLUSTER pod=$(hostname)" > /www/index.html && exec httpd -f -p %[4]d -h /www
        ports:
        - {name: http, containerPort: %[4]d}
        readinessProbe:
          tcpSocket: {port: %[4]d}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: %[1]s
  labels: {app: %[1]s, app.kubernetes.io/managed-by: meshtest}
spec:
  selector: {app: %[1]s}
  ipFamilyPolicy: PreferDualStack
  ports:
  - {name: http, port: %[5]d, targetPort: %[4]d}
`, name, cluster, image, EchoPort, EchoServicePort)
}

func (c *Cluster) deployEcho(ctx context.Context, namespace, name, image string) (*Echo, error) {
	objs, err := decodeManifests(echoManifests(c.Name, name, image))
	if err != nil {
		return nil, err
	}
	if err := c.apply(ctx, namespace, objs); err != nil {
		return nil, err
	}
	e := &Echo{Cluster: c, Namespace: namespace, Name: name}
	deadline := time.Now().Add(echoReadyWait)
	for {
		why, err := e.ready(ctx)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: echo %s/%s: %w", c.Name, namespace, name, err)
		}
		if why == "" {
			return e, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster %s: echo %s/%s not Ready after %s: %s", c.Name, namespace, name, echoReadyWait, why)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster %s: echo %s/%s: %s: %w", c.Name, namespace, name, why, context.Cause(ctx))
		case <-time.After(time.Second):
		}
	}
}

// ready fills in the pod and addresses once a pod is Ready, or says why not.
func (e *Echo) ready(ctx context.Context) (string, error) {
	c := e.Cluster
	svc, err := c.Kube.CoreV1().Services(e.Namespace).Get(ctx, e.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	e.ServiceIP, e.ServiceIPs = svc.Spec.ClusterIP, svc.Spec.ClusterIPs
	pods, err := c.Kube.CoreV1().Pods(e.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + e.Name})
	if err != nil {
		return "", err
	}
	why := "no pod yet"
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if podReady(&p) && p.Status.PodIP != "" {
			e.Pod, e.PodIP = p.Name, p.Status.PodIP
			e.PodIPs = e.PodIPs[:0]
			for _, ip := range p.Status.PodIPs {
				e.PodIPs = append(e.PodIPs, ip.IP)
			}
			return "", nil
		}
		why = podProblem(&p)
	}
	return why, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podProblem says why a pod is not Ready, in the words kubectl describe
// would use: a waiting container's reason, or an unmet condition's message.
func podProblem(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf("pod %s: container %s waiting: %s %s", p.Name, cs.Name, w.Reason, w.Message)
		}
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("pod %s: container %s terminated: %s (exit %d) %s", p.Name, cs.Name, t.Reason, t.ExitCode, t.Message)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return fmt.Sprintf("pod %s: %s: %s", p.Name, c.Type, c.Message)
		}
	}
	return fmt.Sprintf("pod %s: %s", p.Name, p.Status.Phase)
}

// Exec runs argv in the echo pod (see Cluster.Exec).
func (e *Echo) Exec(ctx context.Context, argv ...string) (stdout, stderr string, err error) {
	return e.Cluster.Exec(ctx, e.Namespace, e.Pod, "", argv...)
}

// ExitError is a command that ran in a pod and exited non-zero.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit code %d", e.Code) }
func (e *ExitError) Unwrap() error { return e.Err }

// Exec runs argv in a container of a pod (container "" is the pod's only or
// first one) through the API server, as kubectl exec does, and returns what
// it printed. A command that ran and failed returns an *ExitError.
func (c *Cluster) Exec(ctx context.Context, namespace, pod, container string, argv ...string) (stdout, stderr string, err error) {
	if container == "" {
		p, err := c.Kube.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return "", "", fmt.Errorf("cluster %s: exec in %s/%s: %w", c.Name, namespace, pod, err)
		}
		container = p.Spec.Containers[0].Name
	}
	out, errOut, err := c.kube.Exec(ctx, namespace, pod, container, argv...)
	if err != nil {
		if code, ok := exitCode(err); ok {
			return out, errOut, &ExitError{Code: code, Err: err}
		}
		return out, errOut, fmt.Errorf("cluster %s: exec %q in %s/%s: %w", c.Name, strings.Join(argv, " "), namespace, pod, err)
	}
	return out, errOut, nil
}

// exitCode finds a remote command's exit status in the executor's error
// (client-go's exec.CodeExitError).
func exitCode(err error) (int, bool) {
	var s interface{ ExitStatus() int }
	if errors.As(err, &s) {
		return s.ExitStatus(), true
	}
	return 0, false
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
