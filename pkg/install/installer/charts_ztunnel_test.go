package installer

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// proxyDaemonSet is the proxy DaemonSet of a rendered meshctl-dataplane.
func proxyDaemonSet(t *testing.T, manifest string) appsv1.DaemonSet {
	t.Helper()
	for _, doc := range strings.Split(manifest, "\n---\n") {
		if !strings.Contains(doc, "kind: DaemonSet") || !strings.Contains(doc, "name: meshctl-proxy") {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(doc, "---\n")), &ds); err != nil {
			t.Fatalf("DaemonSet: %v", err)
		}
		return ds
	}
	t.Fatal("no proxy DaemonSet rendered")
	return appsv1.DaemonSet{}
}

// zdsHostDir is the host directory the proxy mounts at the socket's directory.
func zdsHostDir(t *testing.T, ds appsv1.DaemonSet) (mount, host string) {
	t.Helper()
	c := ds.Spec.Template.Spec.Containers[0]
	for _, m := range c.VolumeMounts {
		if m.Name == "ztunnel-run" {
			mount = m.MountPath
		}
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "ztunnel-run" && v.HostPath != nil {
			host = v.HostPath.Path
		}
	}
	return mount, host
}

// TestRenderZtunnelMode: with cni.provider istio-cni, Istio's istio-cni
// meshes pods and serves ZDS; meshctl-cni renders nothing (no second CNI,
// no second agent on the socket) and the proxy dials istio-cni's socket.
func TestRenderZtunnelMode(t *testing.T) {
	t.Parallel()
	out, err := New().Render(clusterValues(t, "cluster2", "cni.provider=istio-cni"))
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(out["meshctl-cni"]); s != "" {
		t.Errorf("meshctl-cni renders in ztunnel mode:\n%s", s)
	}
	ds := proxyDaemonSet(t, out["meshctl-dataplane"])
	if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--zds-socket=/var/run/ztunnel/ztunnel.sock") {
		t.Errorf("proxy args: %v, want istio-cni's socket", args)
	}
	if mount, host := zdsHostDir(t, ds); mount != "/var/run/ztunnel" || host != "/var/run/ztunnel" {
		t.Errorf("ZDS socket dir mounted at %q from host %q, want /var/run/ztunnel from /var/run/ztunnel", mount, host)
	}

	def, err := New().Render(clusterValues(t, "cluster2"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def["meshctl-cni"], "name: meshctl-cni") {
		t.Error("the default render has no meshctl-cni")
	}
}

// TestRenderZDSSocket: the socket path reaches the agent and the proxy, and
// both mount its directory from the host.
func TestRenderZDSSocket(t *testing.T) {
	t.Parallel()
	out, err := New().Render(clusterValues(t, "cluster2", "cni.zdsSocket=/run/zds/agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ds := proxyDaemonSet(t, out["meshctl-dataplane"])
	if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--zds-socket=/run/zds/agent.sock") {
		t.Errorf("proxy args: %v", args)
	}
	if mount, host := zdsHostDir(t, ds); mount != "/run/zds" || host != "/run/zds" {
		t.Errorf("proxy mounts %q from %q, want /run/zds", mount, host)
	}
	cni := out["meshctl-cni"]
	for _, want := range []string{"--zds-socket=/run/zds/agent.sock", "mountPath: /run/zds", "path: /run/zds"} {
		if !strings.Contains(cni, want) {
			t.Errorf("meshctl-cni lacks %q", want)
		}
	}
	for _, bad := range []string{"cni.provider=cilium", "cni.zdsSocket=relative.sock"} {
		if _, err := New().Render(clusterValues(t, "cluster2", bad)); err == nil {
			t.Errorf("%s rendered; the schema should refuse it", bad)
		}
	}
}
