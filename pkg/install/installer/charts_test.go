package installer

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/install/charts"
	"github.com/meshctl/meshctl/pkg/install/values"
)

var update = flag.Bool("update", false, "rewrite golden files")

const golden = "../../../testdata/golden"

// clusterValues are one cluster's values as meshctl computes them: the
// values renderer's for a two-network plan, plus the image and mesh CIDRs.
func clusterValues(t *testing.T, name string, sets ...string) map[string]any {
	t.Helper()
	plan, err := model.NewPlan(model.Request{Env: "golden", Clusters: 2, Networks: 2})
	if err != nil {
		t.Fatal(err)
	}
	out, err := values.New(values.WithProfile("ambient")).Render(plan, name)
	if err != nil {
		t.Fatal(err)
	}
	v := out[0].Values
	v["image"] = map[string]any{"repository": "meshctl/dataplane", "tag": "v0.0.0-golden", "id": "sha256:0123456789abcdef"}
	v["proxy"] = map[string]any{"meshCIDRs": []any{"10.10.0.0/16"}}
	for _, s := range sets { // as --set: over everything else
		if err := strvals.ParseInto(s, v); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// writeCharts copies the embedded charts to a directory, for Helm's lint
// action, which reads charts from disk as `helm lint` does.
func writeCharts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := fs.WalkDir(charts.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, p), 0o755)
		}
		data, err := fs.ReadFile(charts.FS, p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestChartsLint is `helm lint --strict` of each chart, with its defaults
// and with a cluster's values: no error, no warning.
func TestChartsLint(t *testing.T) {
	t.Parallel()
	dir := writeCharts(t)
	for _, name := range charts.Names {
		for _, vals := range []map[string]any{nil, clusterValues(t, "cluster2")} {
			l := action.NewLint()
			l.Strict, l.Namespace = true, "istio-system"
			res := l.Run([]string{filepath.Join(dir, name)}, vals)
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("%s: %s", name, m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("%s: %v", name, err)
			}
			if res.TotalChartsLinted != 1 {
				t.Errorf("%s: linted %d charts", name, res.TotalChartsLinted)
			}
		}
	}
}

// TestChartsShareValues: both charts take one cluster's values, so their
// defaults and schemas must not drift apart.
func TestChartsShareValues(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"values.yaml", "values.schema.json", "templates/_helpers.tpl"} {
		first, err := fs.ReadFile(charts.FS, charts.Names[0]+"/"+f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range charts.Names[1:] {
			other, err := fs.ReadFile(charts.FS, n+"/"+f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, other) {
				t.Errorf("%s differs between %s and %s", f, charts.Names[0], n)
			}
		}
	}
}

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	out, err := New().Render(clusterValues(t, "cluster2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range charts.Names {
		checkGolden(t, "charts-"+name+".yaml", out[name])
	}
	// Spot checks a golden file could hide in a rewrite.
	all := out["meshctl-cni"] + out["meshctl-dataplane"]
	for _, want := range []string{
		`image: "meshctl/dataplane:v0.0.0-golden"`,
		`meshctl.dev/image-id: "sha256:0123456789abcdef"`,
		`topology.istio.io/cluster: "cluster2"`,
		`topology.istio.io/network: "network-2"`,
		"--exclude-namespaces=kube-system,istio-system",
		"--mesh-cidrs=10.10.0.0/16",
		"--proxy-users=system:serviceaccount:istio-system:meshctl-proxy",
		`resourceNames: ["meshctl.dev/workload"]`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("rendered manifests lack %q", want)
		}
	}
	// The manifests are Kubernetes objects, not just YAML.
	for _, doc := range strings.Split(out["meshctl-cni"], "\n---\n") {
		if strings.Contains(doc, "kind: DaemonSet") {
			var ds appsv1.DaemonSet
			if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(doc, "---\n")), &ds); err != nil {
				t.Fatalf("DaemonSet: %v", err)
			}
			if len(ds.Spec.Template.Spec.Containers) != 2 || !ds.Spec.Template.Spec.HostNetwork {
				t.Errorf("cni DaemonSet: %d containers, hostNetwork %v", len(ds.Spec.Template.Spec.Containers), ds.Spec.Template.Spec.HostNetwork)
			}
		}
	}
}

// TestRenderIstiodCA: with proxy.caAddress the proxy gets its certificates
// from istiod, with the mesh root and an istio-ca token mounted; without it
// (TestRenderGolden) neither appears.
func TestRenderIstiodCA(t *testing.T) {
	t.Parallel()
	out, err := New().Render(clusterValues(t, "cluster2", "proxy.caAddress=istiod.istio-system.svc:15012"))
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "charts-meshctl-dataplane-istiod-ca.yaml", out["meshctl-dataplane"])
	for _, doc := range strings.Split(out["meshctl-dataplane"], "\n---\n") {
		if !strings.Contains(doc, "kind: DaemonSet") {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(doc, "---\n")), &ds); err != nil {
			t.Fatalf("DaemonSet: %v", err)
		}
		spec := ds.Spec.Template.Spec
		if !slices.Contains(spec.Containers[0].Args, "--ca-address=istiod.istio-system.svc:15012") {
			t.Errorf("proxy args lack --ca-address: %v", spec.Containers[0].Args)
		}
		var audience string
		for _, v := range spec.Volumes {
			if v.Projected != nil && len(v.Projected.Sources) == 1 && v.Projected.Sources[0].ServiceAccountToken != nil {
				audience = v.Projected.Sources[0].ServiceAccountToken.Audience
			}
		}
		if audience != "istio-ca" {
			t.Errorf("projected token audience = %q, want istio-ca", audience)
		}
	}
	def, err := New().Render(clusterValues(t, "cluster2"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(def["meshctl-dataplane"], "istio-ca") {
		t.Error("the default render mounts istiod's CA material")
	}
}

// TestRenderIstiodXDS: with proxy.xdsAddress the proxy reads workloads,
// services and policies from istiod, with the same root and token as the
// CA client and the pod name and IP ztunnel names itself with; the CA
// stays meshctl's unless caAddress is set too.
func TestRenderIstiodXDS(t *testing.T) {
	t.Parallel()
	out, err := New().Render(clusterValues(t, "cluster2", "proxy.xdsAddress=istiod.istio-system.svc:15012"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, doc := range strings.Split(out["meshctl-dataplane"], "\n---\n") {
		if !strings.Contains(doc, "kind: DaemonSet") {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(doc, "---\n")), &ds); err != nil {
			t.Fatalf("DaemonSet: %v", err)
		}
		found = true
		c := ds.Spec.Template.Spec.Containers[0]
		for _, want := range []string{"--xds-address=istiod.istio-system.svc:15012", "--ca-root=/var/run/secrets/istio/root-cert.pem", "--ca-token=/var/run/secrets/tokens/istio-token"} {
			if !slices.Contains(c.Args, want) {
				t.Errorf("proxy args lack %s: %v", want, c.Args)
			}
		}
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--ca-address") }) {
			t.Errorf("--ca-address without caAddress: %v", c.Args)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
		}
		if env["POD_NAME"] != "metadata.name" || env["INSTANCE_IP"] != "status.podIP" || env["POD_NAMESPACE"] != "metadata.namespace" {
			t.Errorf("proxy env %v", env)
		}
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
		if mounts["istiod-ca-cert"] != "/var/run/secrets/istio" || mounts["istio-token"] != "/var/run/secrets/tokens" {
			t.Errorf("proxy mounts %v", mounts)
		}
	}
	if !found {
		t.Fatal("no proxy DaemonSet rendered")
	}
	def, err := New().Render(clusterValues(t, "cluster2"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(def["meshctl-dataplane"], "xds-address") || strings.Contains(def["meshctl-dataplane"], "INSTANCE_IP") {
		t.Error("the default render configures istiod's XDS")
	}
}

func TestRenderDebugAndNamespace(t *testing.T) {
	t.Parallel()
	v := clusterValues(t, "cluster1", "global.logging.level=debug", "global.istioNamespace=mesh")
	out, err := New().Render(v)
	if err != nil {
		t.Fatal(err)
	}
	all := out["meshctl-cni"] + out["meshctl-dataplane"]
	if strings.Count(all, "- --verbosity=2") != 5 {
		t.Errorf("debug logging: %d of 5 containers have --verbosity=2", strings.Count(all, "- --verbosity=2"))
	}
	if !strings.Contains(all, "namespace: mesh\n") || strings.Contains(all, "namespace: istio-system") {
		t.Error("global.istioNamespace does not move the charts")
	}
}

func TestValidateNamesClusterAndKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sets []string
		want []string
	}{
		{"unknown global key", []string{"global.meshId=typo"}, []string{`cluster "cluster1"`, "meshId"}},
		{"unknown top-level key", []string{"dataplane.enabled=true"}, []string{"dataplane"}},
		{"wrong type", []string{"signer.replicas=two"}, []string{"/signer/replicas"}},
		{"bad enum", []string{"image.pullPolicy=Sometimes"}, []string{"/image/pullPolicy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := New().Validate(Target{Cluster: "cluster1", Kubeconfig: "x", Values: clusterValues(t, "cluster1", tt.sets...)})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
	// Istio's own sections pass through: the same values feed Istio's charts.
	if err := New().Validate(Target{Cluster: "c", Kubeconfig: "x", Values: clusterValues(t, "cluster1", "pilot.env.FOO=bar", "meshConfig.accessLogFile=/dev/stdout")}); err != nil {
		t.Errorf("Istio passthrough values: %v", err)
	}
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(golden, name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (rerun with -update and review the diff):\n%s", name, got)
	}
}

func TestShorten(t *testing.T) {
	t.Parallel()
	long := `cannot patch "meshctl-proxy" with kind DaemonSet: patch: Invalid value: "{\"a\":\"` + strings.Repeat("x", 300) + `\"}": quantities must match`
	if got := shorten(long); got != `cannot patch "meshctl-proxy" with kind DaemonSet: patch: Invalid value: "…": quantities must match` {
		t.Errorf("shorten: %s", got)
	}
}

// TestHostNetworkListenersBindTheNodeIP: the cni DaemonSet's Pods share the
// node's network namespace, so a listener on ":port" is open on every host
// interface. Each listen flag must name the node IP (downward API
// status.hostIP, which is also where kubelet sends the probes).
func TestHostNetworkListenersBindTheNodeIP(t *testing.T) {
	t.Parallel()
	out, err := New().Render(clusterValues(t, "cluster1"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, doc := range strings.Split(out["meshctl-cni"], "\n---\n") {
		if !strings.Contains(doc, "kind: DaemonSet") {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(doc, "---\n")), &ds); err != nil {
			t.Fatalf("DaemonSet: %v", err)
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			hostIP := false
			for _, e := range c.Env {
				if e.Name == "HOST_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP" {
					hostIP = true
				}
			}
			for _, a := range c.Args {
				if !strings.HasPrefix(a, "--ready-addr=") && !strings.HasPrefix(a, "--metrics-addr=") {
					continue
				}
				found++
				if _, addr, _ := strings.Cut(a, "="); !strings.HasPrefix(addr, "[$(HOST_IP)]:") || !hostIP {
					t.Errorf("container %s: %s listens beyond the node IP (HOST_IP from status.hostIP: %v)", c.Name, a, hostIP)
				}
			}
		}
	}
	if found != 2 {
		t.Errorf("%d listen flags in the cni DaemonSet, want 2 (readiness, metrics)", found)
	}
}

// TestProxyCannotDeleteCSRs: the node proxy's ClusterRole may create CSRs
// and read them, nothing more (RBAC cannot narrow a verb to the proxy's own
// generated names, so delete would reach every CSR in the cluster); the
// signer, which deletes finished CSRs, holds delete.
func TestProxyCannotDeleteCSRs(t *testing.T) {
	t.Parallel()
	out, err := New().Render(clusterValues(t, "cluster1"))
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string]string{}
	for _, doc := range strings.Split(out["meshctl-dataplane"], "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(strings.TrimPrefix(doc, "---\n")), &role); err != nil || role.Kind != "ClusterRole" {
			continue
		}
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "certificatesigningrequests") {
				verbs[role.Name] = strings.Join(r.Verbs, ",")
			}
		}
	}
	if got := verbs["meshctl-proxy"]; got != "create,get" {
		t.Errorf("proxy's verbs on CSRs: %q, want create,get", got)
	}
	if got := verbs["meshctl-signer"]; !strings.Contains(got, "delete") {
		t.Errorf("signer's verbs on CSRs: %q, want delete among them", got)
	}
}

// TestRenderGateway: on two networks the dataplane chart deploys the
// east-west gateway: Pods the istio-eastwestgateway Service selects,
// running the gateway mode for the cluster's network under the gateway's
// own service account, which the signer accepts; on one network, none.
func TestRenderGateway(t *testing.T) {
	t.Parallel()
	out, err := New().Render(clusterValues(t, "cluster2"))
	if err != nil {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	for _, doc := range strings.Split(out["meshctl-dataplane"], "\n---\n") {
		if strings.Contains(doc, "kind: Deployment") && strings.Contains(doc, "name: istio-eastwestgateway") {
			dep = &appsv1.Deployment{}
			if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(doc, "---\n")), dep); err != nil {
				t.Fatalf("gateway Deployment: %v", err)
			}
		}
	}
	if dep == nil {
		t.Fatal("no gateway Deployment on two networks")
	}
	labels := dep.Spec.Template.Labels
	for k, v := range gateway.GatewaySelector("network-2") {
		if labels[k] != v {
			t.Errorf("gateway Pod label %s=%q, want %q (what the Service selects)", k, labels[k], v)
		}
	}
	spec := dep.Spec.Template.Spec
	args := strings.Join(spec.Containers[0].Args, " ")
	for _, want := range []string{"dataplane gateway", "--network=network-2", "--cluster=cluster2", "--listen=:15008"} {
		if !strings.Contains(args, want) {
			t.Errorf("gateway args %q lack %q", args, want)
		}
	}
	if spec.ServiceAccountName != "istio-eastwestgateway" {
		t.Errorf("gateway service account %q", spec.ServiceAccountName)
	}
	if !strings.Contains(out["meshctl-dataplane"], "--proxy-users=system:serviceaccount:istio-system:meshctl-proxy,system:serviceaccount:istio-system:istio-eastwestgateway") {
		t.Error("the signer does not accept the gateway's requests")
	}

	plan, err := model.NewPlan(model.Request{Env: "golden", Clusters: 2})
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := values.New(values.WithProfile("ambient")).Render(plan, "cluster2")
	if err != nil {
		t.Fatal(err)
	}
	one, err := New().Render(rendered[0].Values)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(one["meshctl-dataplane"], "istio-eastwestgateway") {
		t.Error("a one-network mesh got an east-west gateway")
	}
}
