package enroll

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMeshed(t *testing.T) {
	t.Parallel()
	ambientNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: map[string]string{DataplaneModeLabel: DataplaneModeAmbient}}}
	plainNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}
	pod := func(mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "app", Labels: map[string]string{}, Annotations: map[string]string{}}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		ns   *corev1.Namespace
		want bool
	}{
		{"namespace opted in", pod(nil), ambientNS, true},
		{"namespace not opted in", pod(nil), plainNS, false},
		{"namespace unknown", pod(nil), nil, false},
		{"pod opted in", pod(func(p *corev1.Pod) { p.Labels[DataplaneModeLabel] = DataplaneModeAmbient }), plainNS, true},
		{"pod opted out", pod(func(p *corev1.Pod) { p.Labels[DataplaneModeLabel] = DataplaneModeNone }), ambientNS, false},
		{"host network", pod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), ambientNS, false},
		{"sidecar injected", pod(func(p *corev1.Pod) { p.Annotations[SidecarStatusAnnotation] = "{}" }), ambientNS, false},
		{"excluded namespace", pod(func(p *corev1.Pod) { p.Namespace = "kube-system" }), ambientNS, false},
		{"nil pod", nil, ambientNS, false},
	}
	for _, c := range cases {
		if got := Meshed(c.pod, c.ns, []string{"kube-system"}); got != c.want {
			t.Errorf("%s: Meshed = %v, want %v", c.name, got, c.want)
		}
	}
}
