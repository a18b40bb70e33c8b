package check

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const (
	serverName = "server"
	clientName = "client"
	// answer prefixes what a server sends; the cluster's name follows, so
	// a probe knows it reached the cluster it meant to.
	answer = "meshctl-check-server"
)

var (
	serverLabels = map[string]string{"app.kubernetes.io/name": "meshctl-check-server"}
	// zero makes pod deletion immediate: sh and nc ignore SIGTERM.
	zero = int64(0)
)

// startDeletingNamespace deletes the check's namespace, if any, without
// waiting for it to go.
func (c *Checker) startDeletingNamespace(ctx context.Context, client kubernetes.Interface) error {
	err := client.CoreV1().Namespaces().Delete(ctx, c.namespace, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", c.namespace, err)
	}
	return nil
}

// deleteNamespace deletes the check's namespace and waits until it is gone.
func (c *Checker) deleteNamespace(ctx context.Context, client kubernetes.Interface) error {
	nss := client.CoreV1().Namespaces()
	if err := c.startDeletingNamespace(ctx, client); err != nil {
		return err
	}
	return c.wait(ctx, "namespace "+c.namespace+" to be deleted", func() (bool, string, error) {
		_, err := nss.Get(ctx, c.namespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still terminating", err
	})
}

// deletePods deletes every pod of the check's namespace with a grace
// period of 0, which removes them at once, and waits until none is listed.
func (c *Checker) deletePods(ctx context.Context, client kubernetes.Interface) error {
	pods := client.CoreV1().Pods(c.namespace)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the pods of namespace %s: %w", c.namespace, err)
	}
	return c.wait(ctx, "the pods of namespace "+c.namespace+" to be deleted", func() (bool, string, error) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return len(list.Items) == 0, fmt.Sprintf("%d left", len(list.Items)), nil
	})
}

// startServer creates the namespace, the server pod and its Service, and
// waits until the pod runs and both have their addresses.
func (c *Checker) startServer(ctx context.Context, r *run, runs []*run) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "meshctl"}}}
	if c.meshed {
		ns.Labels[DataplaneModeLabel] = "ambient"
	}
	if _, err := r.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", c.namespace, err)
	}
	// busybox nc: -ll keeps listening, -e answers each connection with
	// the cluster's name and closes it.
	server := c.pod(serverName, serverLabels, corev1.RestartPolicyAlways,
		"nc", "-ll", "-p", strconv.Itoa(Port), "-e", "/bin/echo", answer, r.plan.Name)
	if c.meshed {
		if err := c.meshPod(ctx, r, server, ServerServiceAccount); err != nil {
			return err
		}
		server.Labels = map[string]string{clusterLabel: r.plan.Name}
		maps.Copy(server.Labels, serverLabels)
	}
	if err := c.createPod(ctx, r, server); err != nil {
		return fmt.Errorf("creating server pod: %w", err)
	}
	// PreferDualStack: a dual-stack cluster's Service gets a v4 and a v6
	// address, and both are probed; a single-stack one gets its one.
	policy := corev1.IPFamilyPolicyPreferDualStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: serverName, Namespace: c.namespace},
		Spec: corev1.ServiceSpec{
			Selector:       serverLabels,
			IPFamilyPolicy: &policy,
			Ports:          []corev1.ServicePort{{Name: "tcp", Port: Port, TargetPort: intstr.FromInt32(Port)}},
		},
	}
	if c.meshed {
		// One Service per cluster's server, in every cluster: the mesh
		// makes each one service whose endpoint is in that cluster only.
		r.svcByTo = map[string][]string{}
		for _, to := range runs {
			s := svc.DeepCopy()
			s.Name = serviceName(to.plan.Name)
			s.Spec.Selector = map[string]string{clusterLabel: to.plan.Name}
			maps.Copy(s.Spec.Selector, serverLabels)
			created, err := r.client.CoreV1().Services(c.namespace).Create(ctx, s, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating service %s: %w", s.Name, err)
			}
			if len(created.Spec.ClusterIPs) == 0 {
				return fmt.Errorf("service %s got no cluster IP", s.Name)
			}
			r.svcByTo[to.plan.Name] = created.Spec.ClusterIPs
		}
	} else {
		created, err := r.client.CoreV1().Services(c.namespace).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating server service: %w", err)
		}
		r.svcIPs = created.Spec.ClusterIPs
		if len(r.svcIPs) == 0 {
			return fmt.Errorf("server service got no cluster IP")
		}
	}
	return nil
}

// waitServer waits for the server pod to run and records its addresses.
func (c *Checker) waitServer(ctx context.Context, r *run) error {
	return c.wait(ctx, "server pod "+c.namespace+"/"+serverName+" to run", func() (bool, string, error) {
		p, err := r.client.CoreV1().Pods(c.namespace).Get(ctx, serverName, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.PodIPs) == 0 {
			return false, podProblem(p), nil
		}
		r.podIPs = nil
		r.server = endpoint{pod: c.namespace + "/" + serverName, node: p.Spec.NodeName}
		for _, ip := range p.Status.PodIPs {
			r.podIPs = append(r.podIPs, ip.IP)
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				r.server.ips = append(r.server.ips, a)
			}
		}
		return true, "", nil
	})
}

// createPod creates p, waiting while admission refuses it: a cluster whose
// controllers are still starting (a node just restarted) has not yet made
// the namespace's default ServiceAccount, and admission refuses Pods until
// it has.
func (c *Checker) createPod(ctx context.Context, r *run, p *corev1.Pod) error {
	return c.wait(ctx, "pod "+p.Name+" to be admitted", func() (bool, string, error) {
		_, err := r.client.CoreV1().Pods(c.namespace).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "serviceaccount") {
			return false, err.Error(), nil
		}
		return err == nil, "", err
	})
}

// startClient creates the client pod, idle until the probes are run in it
// (runClient): it starts while the server pod does. The probes need the
// servers' addresses, known only once those run; a client pod created then
// would add its own start (≈ 3 s on kind) to every check.
func (c *Checker) startClient(ctx context.Context, r *run) error {
	// Deleted by the cleanup; a check killed before that leaves it for the
	// next one, which deletes the namespace first.
	p := c.pod(clientName, nil, corev1.RestartPolicyNever, "sleep", "3600")
	if c.meshed {
		if err := c.meshPod(ctx, r, p, ClientServiceAccount); err != nil {
			return err
		}
		// The client's addresses, for finding its connections in the
		// node proxies' logs. Its node's too: a tunnel to another
		// cluster leaves the node masqueraded (kind's kindnet
		// masquerades what leaves for addresses outside its own
		// cluster), so the server's node proxy sees it come from the
		// client's node (found on kind).
		p.Spec.Containers[0].Env = []corev1.EnvVar{
			{Name: "POD_IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
			{Name: "HOST_IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIPs"}}},
		}
	}
	if err := c.createPod(ctx, r, p); err != nil {
		return fmt.Errorf("creating client pod: %w", err)
	}
	return nil
}

// runClient runs one probe per tested entry of probes in the client pod,
// all at once, and fills in their outcomes from what it printed.
func (c *Checker) runClient(ctx context.Context, r *run, probes []Probe) error {
	sh := script(probes, c.attempts)
	if c.meshed {
		sh = `echo "` + clientIPsLine + ` $POD_IPS,$HOST_IPS"` + "\n" + sh
	}
	pods := r.client.CoreV1().Pods(c.namespace)
	err := c.wait(ctx, "client pod "+c.namespace+"/"+clientName+" to run", func() (bool, string, error) {
		p, err := pods.Get(ctx, clientName, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			r.clientPod = endpoint{pod: c.namespace + "/" + clientName, node: p.Spec.NodeName}
			return true, "", nil
		case corev1.PodSucceeded, corev1.PodFailed:
			return false, "", fmt.Errorf("client pod ended before the probes ran: %s", podProblem(p))
		}
		return false, podProblem(p), nil
	})
	if err != nil {
		return err
	}
	execCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	out, errOut, err := r.kube.Exec(execCtx, c.namespace, clientName, clientName, "sh", "-c", sh)
	if err != nil {
		if msg := strings.TrimSpace(errOut); msg != "" {
			err = fmt.Errorf("%w: %s", err, oneLine(msg))
		}
		return fmt.Errorf("running the probes in client pod %s/%s: %w", c.namespace, clientName, err)
	}
	parse(out, probes, c.attempts)
	if c.meshed {
		r.clientPod.ips = clientIPs(out)
		if len(r.clientPod.ips) == 0 {
			return fmt.Errorf("client pod did not print its addresses:\n%s", out)
		}
	}
	return nil
}

// clientIPsLine starts the meshed client's first line: its addresses.
const clientIPsLine = "CLIENT_IPS"

// clientIPs reads the addresses the meshed client printed (the downward
// API's status.podIPs and status.hostIPs, comma-separated).
func clientIPs(out string) []netip.Addr {
	var ips []netip.Addr
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || f[0] != clientIPsLine {
			continue
		}
		for _, s := range strings.Split(f[1], ",") {
			if a, err := netip.ParseAddr(s); err == nil {
				ips = append(ips, a)
			}
		}
	}
	return ips
}

// meshPod gives a meshed check pod its own service account (its identity
// in the mesh), created if missing.
func (c *Checker) meshPod(ctx context.Context, r *run, p *corev1.Pod, sa string) error {
	_, err := r.client.CoreV1().ServiceAccounts(c.namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: c.namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating service account %s: %w", sa, err)
	}
	p.Spec.ServiceAccountName = sa
	return nil
}

// pod is a check pod: the test image as it is on the nodes, deleted at once.
func (c *Checker) pod(name string, labels map[string]string, restart corev1.RestartPolicy, argv ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 restart,
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  new(bool),
			Containers: []corev1.Container{{
				Name: name, Image: c.image, ImagePullPolicy: corev1.PullIfNotPresent, Command: argv,
			}},
		},
	}
}

// connectTimeout is nc's connect timeout per attempt, in seconds.
const connectTimeout = 3

// script is the client's shell script: every probe in the background, each
// retried, each printing one "RESULT <index> ok" or "RESULT <index> fail
// <what nc said>" line. Untested gateway entries are left out.
func script(probes []Probe, attempts int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `probe() {
  i=0; out=""
  while [ $i -lt %d ]; do
    out=$(%s 2>&1)
    case "$out" in *"%s $3"*) echo "RESULT $1 ok"; return;; esac
    i=$((i+1)); sleep 1
  done
  echo "RESULT $1 fail $(echo "${out:-no answer}" | tr '\n' ' ')"
}
`, attempts, ProbeCommand(`"$2"`, Port, connectTimeout, ""), answer)
	for i, p := range probes {
		if untested(&p) {
			continue
		}
		fmt.Fprintf(&b, "probe %d %s %s &\n", i, p.Address, p.To)
	}
	b.WriteString("wait\n")
	return b.String()
}

// parse fills in probe outcomes from the client's output; a tested probe
// that printed nothing failed.
func parse(out string, probes []Probe, attempts int) {
	seen := map[int]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(strings.TrimSpace(line), " ", 4)
		if len(f) < 3 || f[0] != "RESULT" {
			continue
		}
		i, err := strconv.Atoi(f[1])
		if err != nil || i < 0 || i >= len(probes) || untested(&probes[i]) {
			continue
		}
		seen[i] = true
		if f[2] == "ok" {
			probes[i].Status = StatusOK
			continue
		}
		probes[i].Status = StatusFailed
		msg := "no answer"
		if len(f) == 4 && strings.TrimSpace(f[3]) != "" {
			msg = oneLine(f[3])
		}
		probes[i].Error = fmt.Sprintf("%s:%d: %s (after %d attempts)", probes[i].Address, Port, msg, attempts)
	}
	for i := range probes {
		if !untested(&probes[i]) && !seen[i] {
			probes[i].Status = StatusFailed
			probes[i].Error = "the client pod reported nothing for this probe"
		}
	}
}

// wait polls cond until it is done, fails, or the timeout passes; the
// timeout error carries cond's last word on why it is not done.
func (c *Checker) wait(ctx context.Context, what string, cond func() (bool, string, error)) error {
	deadline := time.Now().Add(c.timeout)
	for {
		done, why, err := cond()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s: %s", c.timeout, what, why)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		case <-time.After(c.poll):
		}
	}
}
