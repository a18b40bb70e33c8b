package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/enroll"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/zds"
)

// addPod meshes pod inside the netns at netnsPath: rules first, then the
// proxy. It returns only when both are done, or the error that stopped it.
// A pod the agent already has is re-added (a new sandbox) only if replace;
// otherwise it is left alone, which makes concurrent informer-driven
// enrollments of one pod harmless.
func (a *Agent) addPod(ctx context.Context, pod *corev1.Pod, netnsPath string, ips []netip.Addr, replace bool) error {
	ns, err := os.Open(netnsPath)
	if err != nil {
		return fmt.Errorf("opening netns of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	// The proxy gets its own descriptor; ours stays for removing the rules.
	forProxy, err := os.Open(netnsPath)
	if err != nil {
		ns.Close()
		return fmt.Errorf("opening netns of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, known := a.pods[string(pod.UID)]; known && !replace {
		ns.Close()
		forProxy.Close()
		return nil
	}
	if err := a.rules.Apply(ns); err != nil {
		ns.Close()
		forProxy.Close()
		return fmt.Errorf("redirecting %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	uid := string(pod.UID)
	if old := a.pods[uid]; old != nil && old.netns != nil {
		old.netns.Close() // a new sandbox for the same pod
	}
	info := workloadInfo(pod)
	a.pods[uid] = &meshedPod{
		rec:   podRecord{Namespace: pod.Namespace, Name: pod.Name, ServiceAccount: info.ServiceAccount, Netns: netnsPath, IPs: ips},
		netns: ns,
	}
	a.saveLocked()
	if err := a.probes.AddPod(ips...); err != nil {
		// Not fatal: an unexempted probe still reaches the pod, through
		// the proxy; refusing the pod over it would be worse.
		a.log.Warn("exempting probes", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
	if err := a.zds.AddWorkload(ctx, zds.Workload{UID: uid, Info: info, Netns: forProxy}); err != nil {
		return fmt.Errorf("handing %s/%s to the proxy: %w", pod.Namespace, pod.Name, err)
	}
	a.log.Info("pod meshed", "pod", pod.Namespace+"/"+pod.Name, "uid", uid)
	return nil
}

// removePod undoes addPod. Failures are logged, not returned: the pod is
// gone either way, and its rules die with its netns.
func (a *Agent) removePod(ctx context.Context, uid, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.pods[uid]
	if !ok {
		return
	}
	if p.netns != nil {
		if err := a.rules.Remove(p.netns); err != nil {
			a.log.Warn("removing redirection", "pod", p.rec.Namespace+"/"+p.rec.Name, "err", err)
		}
		p.netns.Close()
	}
	if err := a.probes.RemovePod(p.rec.IPs...); err != nil {
		a.log.Warn("removing probe exemption", "pod", p.rec.Namespace+"/"+p.rec.Name, "err", err)
	}
	delete(a.pods, uid)
	a.saveLocked()
	if err := a.zds.DeleteWorkload(ctx, uid); err != nil {
		a.log.Warn("removing pod from proxy", "pod", p.rec.Namespace+"/"+p.rec.Name, "err", err)
	}
	a.log.Info("pod unmeshed", "pod", p.rec.Namespace+"/"+p.rec.Name, "uid", uid, "reason", why)
}

func (a *Agent) saveLocked() {
	recs := make(map[string]podRecord, len(a.pods))
	for uid, p := range a.pods {
		recs[uid] = p.rec
	}
	if err := saveState(a.stateDir, recs); err != nil {
		a.log.Error("saving agent state", "err", err)
	}
}

func (a *Agent) meshed(pod *corev1.Pod) bool {
	ns, _ := a.nsLister.Get(pod.Namespace)
	return enroll.Meshed(pod, ns, a.excluded) && pod.Spec.NodeName == a.node
}

func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func (a *Agent) podChanged(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	switch {
	case finished(pod):
		a.removePod(ctx, string(pod.UID), "pod finished")
	case !a.meshed(pod):
		a.removePod(ctx, string(pod.UID), "pod no longer enrolled")
	default:
		a.enrollRunning(ctx, pod)
	}
}

// enrollRunning meshes a pod that became enrolled after its sandbox was
// created, finding its netns in procfs. Pods the agent already has, and
// pods without an IP yet (the CNI plugin will ask for those), are left.
func (a *Agent) enrollRunning(ctx context.Context, pod *corev1.Pod) {
	a.mu.Lock()
	_, known := a.pods[string(pod.UID)]
	a.mu.Unlock()
	if known || pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning {
		return // cheap early out; addPod re-checks under the lock
	}
	path, err := findNetns(a.procRoot, string(pod.UID))
	if err != nil {
		a.log.Warn("pod enrolled while running; netns not found", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return
	}
	if err := a.addPod(ctx, pod, path, statusIPs(pod), false); err != nil {
		a.log.Warn("meshing running pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

func statusIPs(pod *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	for _, ip := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func (a *Agent) podDeleted(ctx context.Context, obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		a.removePod(ctx, string(pod.UID), "pod deleted")
	}
}

// namespaceChanged unmeshes the namespace's pods when it leaves the mesh.
func (a *Agent) namespaceChanged(ctx context.Context, obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	a.mu.Lock()
	var uids []string
	for uid, p := range a.pods {
		if p.rec.Namespace == ns.Name {
			uids = append(uids, uid)
		}
	}
	a.mu.Unlock()
	for _, uid := range uids {
		pod := a.podByUID(ns.Name, uid)
		if pod == nil || !enroll.Meshed(pod, ns, a.excluded) {
			a.removePod(ctx, uid, "namespace no longer enrolled")
		}
	}
	// And the reverse: a namespace joining the mesh enrolls its running pods.
	pods, _ := a.podLister.Pods(ns.Name).List(everything)
	for _, pod := range pods {
		if enroll.Meshed(pod, ns, a.excluded) && pod.Spec.NodeName == a.node {
			a.enrollRunning(ctx, pod)
		}
	}
}

func (a *Agent) podByUID(namespace, uid string) *corev1.Pod {
	pods, _ := a.podLister.Pods(namespace).List(everything)
	for _, p := range pods {
		if string(p.UID) == uid {
			return p
		}
	}
	return nil
}

// lookupPod reads the pod from the informer cache, falling back to the API
// server: at sandbox creation the watch may not have delivered it yet.
func (a *Agent) lookupPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if p, err := a.podLister.Pods(namespace).Get(name); err == nil {
		return p, nil
	}
	p, err := a.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("getting pod %s/%s: %w", namespace, name, err)
	}
	return p, nil
}

// restore brings back the pods meshed before a restart, from the state
// file and the informer cache. Pods that are gone are forgotten; pods whose
// netns cannot be reopened are kept (KeepWorkload) rather than dropped.
// It returns how many pods it restored.
func (a *Agent) restore(ctx context.Context) (int, error) {
	recs, err := loadState(a.stateDir)
	if err != nil {
		a.log.Warn("restoring meshed pods", "err", err)
	}
	for uid, rec := range recs {
		pod, err := a.podLister.Pods(rec.Namespace).Get(rec.Name)
		if apierrors.IsNotFound(err) || (err == nil && (string(pod.UID) != uid || finished(pod) || !a.meshed(pod))) {
			a.log.Info("forgetting pod meshed before restart", "pod", rec.Namespace+"/"+rec.Name)
			continue
		}
		if err != nil {
			a.log.Warn("restoring pod", "pod", rec.Namespace+"/"+rec.Name, "err", err)
			continue
		}
		if err := a.addPod(ctx, pod, rec.Netns, rec.IPs, true); err != nil && !errors.Is(err, zds.ErrNoProxy) {
			// The netns is gone but the pod is not (yet): let a proxy that
			// still serves it keep it until the informer says otherwise.
			a.log.Warn("restoring pod; keeping it", "pod", rec.Namespace+"/"+rec.Name, "err", err)
			a.mu.Lock()
			a.pods[uid] = &meshedPod{rec: rec}
			a.zds.KeepWorkload(uid)
			a.mu.Unlock()
		}
	}
	// Enrolled pods running without a record (state lost, or enrolled
	// while the agent was down): find their netns, else keep them.
	pods, _ := a.podLister.List(everything)
	for _, pod := range pods {
		uid := string(pod.UID)
		a.mu.Lock()
		_, known := a.pods[uid]
		a.mu.Unlock()
		if known || finished(pod) || !a.meshed(pod) || pod.Status.PodIP == "" {
			continue
		}
		path, err := findNetns(a.procRoot, uid)
		if err == nil {
			err = a.addPod(ctx, pod, path, statusIPs(pod), false)
		}
		if err != nil && !errors.Is(err, zds.ErrNoProxy) {
			a.log.Warn("enrolled pod without netns; keeping it", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			a.mu.Lock()
			a.pods[uid] = &meshedPod{rec: podRecord{Namespace: pod.Namespace, Name: pod.Name, IPs: statusIPs(pod)}}
			a.zds.KeepWorkload(uid)
			a.mu.Unlock()
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.saveLocked()
	// Recreate the probe set with exactly the pods still meshed, dropping
	// IPs of pods deleted while the agent was down.
	var ips []netip.Addr
	for _, p := range a.pods {
		ips = append(ips, p.rec.IPs...)
	}
	if err := a.probes.Setup(ips...); err != nil {
		return 0, fmt.Errorf("setting up probe SNAT: %w", err)
	}
	return len(a.pods), nil
}
