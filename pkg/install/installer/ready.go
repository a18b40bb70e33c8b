package installer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// Workload is a DaemonSet or Deployment a release installed.
type Workload struct {
	Kind      string
	Namespace string
	Name      string
}

func (w Workload) String() string { return w.Kind + " " + w.Namespace + "/" + w.Name }

// Workloads lists the DaemonSets and Deployments of a release manifest;
// objects without a namespace are in ns.
func Workloads(manifest, ns string) ([]Workload, error) {
	var out []Workload
	dec := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	for {
		doc, err := dec.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the release manifest: %w", err)
		}
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("reading the release manifest: %w", err)
		}
		if obj.Kind != "DaemonSet" && obj.Kind != "Deployment" {
			continue
		}
		w := Workload{Kind: obj.Kind, Namespace: obj.Metadata.Namespace, Name: obj.Metadata.Name}
		if w.Namespace == "" {
			w.Namespace = ns
		}
		out = append(out, w)
	}
	return out, nil
}

// WaitReady waits until every workload has all its Pods Ready on every
// node, judged by the objects' own status — a DaemonSet's
// desiredNumberScheduled, numberReady and updatedNumberScheduled all equal
// at the current generation; a Deployment's updated and available replicas
// equal to its replicas — not by Helm's readiness check, which counts a
// DaemonSet ready when NumberReady ≥ desired − maxUnavailable and so waits
// for nothing on a one-node cluster with maxUnavailable 1.
//
// A Pod that cannot start is named with its reason: at once for an image the
// node will never have (ErrImageNeverPull, InvalidImageName), at the
// timeout for the rest (ImagePullBackOff, CrashLoopBackOff with its last
// termination message, Pending with the scheduler's message).
func WaitReady(ctx context.Context, cs kubernetes.Interface, ws []Workload, timeout, poll time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var waiting []string
		for _, w := range ws {
			ready, why, fatal, err := workloadReady(ctx, cs, w)
			switch {
			case err != nil:
				waiting = append(waiting, fmt.Sprintf("%s: %v", w, err))
			case fatal:
				return fmt.Errorf("%s cannot become ready: %s", w, why)
			case !ready:
				waiting = append(waiting, fmt.Sprintf("%s: %s", w, why))
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s:\n  %s", timeout, strings.Join(waiting, "\n  "))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", strings.Join(waiting, "; "), context.Cause(ctx))
		case <-time.After(poll):
		}
	}
}

// workloadReady reports whether w is ready; when not, why (with its Pods'
// problems) and whether a Pod can never start.
func workloadReady(ctx context.Context, cs kubernetes.Interface, w Workload) (ready bool, why string, fatal bool, err error) {
	var sel *metav1.LabelSelector
	switch w.Kind {
	case "DaemonSet":
		ds, err := cs.AppsV1().DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", false, err
		}
		st := ds.Status
		if st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled == st.NumberReady && st.DesiredNumberScheduled == st.UpdatedNumberScheduled {
			return true, "", false, nil
		}
		sel = ds.Spec.Selector
		why = fmt.Sprintf("%d of %d pods ready, %d updated", st.NumberReady, st.DesiredNumberScheduled, st.UpdatedNumberScheduled)
		if st.ObservedGeneration < ds.Generation {
			why = "its controller has not seen the new spec yet"
		}
	case "Deployment":
		d, err := cs.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", false, err
		}
		if deploymentReady(d) {
			return true, "", false, nil
		}
		sel = d.Spec.Selector
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		why = fmt.Sprintf("%d of %d replicas available, %d updated", d.Status.AvailableReplicas, want, d.Status.UpdatedReplicas)
		if d.Status.ObservedGeneration < d.Generation {
			why = "its controller has not seen the new spec yet"
		}
	default:
		return false, "", false, fmt.Errorf("cannot wait for a %s", w.Kind)
	}
	probs, fatal := podProblems(ctx, cs, w.Namespace, sel)
	if len(probs) > 0 {
		why += ": " + strings.Join(probs, "; ")
	}
	return false, why, fatal, nil
}

func deploymentReady(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.AvailableReplicas == want && st.Replicas == want
}

// neverStarts are waiting reasons no wait cures.
var neverStarts = map[string]bool{"ErrImageNeverPull": true, "InvalidImageName": true}

// podProblems says, for each Pod of the selector that is not Ready, why.
func podProblems(ctx context.Context, cs kubernetes.Interface, ns string, sel *metav1.LabelSelector) ([]string, bool) {
	if sel == nil {
		return nil, false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, false
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: s.String()})
	if err != nil {
		return []string{"listing its pods: " + err.Error()}, false
	}
	var out []string
	fatal := false
	for _, p := range pods.Items {
		why, never := podNotReady(&p)
		if why == "" {
			continue
		}
		fatal = fatal || never
		where := ""
		if p.Spec.NodeName != "" {
			where = " on " + p.Spec.NodeName
		}
		out = append(out, fmt.Sprintf("pod %s%s: %s", p.Name, where, why))
	}
	sort.Strings(out)
	return out, fatal
}

// podNotReady is why a Pod is not Ready ("" when it is), and whether that
// can never change by waiting.
func podNotReady(p *corev1.Pod) (string, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return "", false
		}
	}
	for _, c := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := c.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
			why := fmt.Sprintf("container %s: %s", c.Name, w.Reason)
			if w.Message != "" {
				why += ": " + oneLine(w.Message)
			}
			if t := c.LastTerminationState.Terminated; t != nil {
				why += fmt.Sprintf(" (last exit %d, %s", t.ExitCode, t.Reason)
				if t.Message != "" {
					why += ": " + oneLine(t.Message)
				}
				why += ")"
			}
			return why, neverStarts[w.Reason]
		}
		if t := c.State.Terminated; t != nil && t.ExitCode != 0 {
			return fmt.Sprintf("container %s exited %d: %s %s", c.Name, t.ExitCode, t.Reason, oneLine(t.Message)), false
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return "not scheduled: " + oneLine(c.Message), false
		}
	}
	if p.Status.Phase == corev1.PodPending {
		return "Pending", false
	}
	return "not Ready", false
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
