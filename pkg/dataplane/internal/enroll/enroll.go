// Package enroll decides which pods are in the mesh, the same way for the
// CNI plugin (at sandbox creation) and the node agent (on every pod event).
package enroll

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Labels and annotations, as upstream Istio ambient uses them.
const (
	DataplaneModeLabel   = "istio.io/dataplane-mode"
	DataplaneModeAmbient = "ambient"
	DataplaneModeNone    = "none"
	// SidecarStatusAnnotation marks a pod that already has a sidecar; it
	// does its own capture and must not be redirected twice.
	SidecarStatusAnnotation = "sidecar.istio.io/status"
)

// Meshed reports whether pod belongs in the mesh: opted in by its own label
// or its namespace's, not opted out, not host-networked, not sidecar-injected
// and not in an excluded namespace. ns may be nil when unknown.
func Meshed(pod *corev1.Pod, ns *corev1.Namespace, excluded []string) bool {
	if pod == nil || pod.Spec.HostNetwork || slices.Contains(excluded, pod.Namespace) {
		return false
	}
	if _, ok := pod.Annotations[SidecarStatusAnnotation]; ok {
		return false
	}
	switch pod.Labels[DataplaneModeLabel] {
	case DataplaneModeNone:
		return false
	case DataplaneModeAmbient:
		return true
	}
	return ns != nil && ns.Labels[DataplaneModeLabel] == DataplaneModeAmbient
}
