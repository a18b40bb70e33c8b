package model

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestNewPlanGenerated(t *testing.T) {
	t.Parallel()
	prefix := "x-"
	tests := []struct {
		name    string
		req     Request
		want    []string // name kindName network pods svcs, per cluster
		wantErr string
	}{
		{
			name: "three clusters, one network, Istio's subnets",
			req:  Request{Clusters: 3},
			want: []string{
				"cluster1 cluster1 network-1 10.10.0.0/16 10.255.10.0/24",
				"cluster2 cluster2 network-1 10.20.0.0/16 10.255.20.0/24",
				"cluster3 cluster3 network-1 10.30.0.0/16 10.255.30.0/24",
			},
		},
		{
			name: "networks round-robin",
			req:  Request{Clusters: 3, Networks: 2},
			want: []string{
				"cluster1 cluster1 network-1 10.10.0.0/16 10.255.10.0/24",
				"cluster2 cluster2 network-2 10.20.0.0/16 10.255.20.0/24",
				"cluster3 cluster3 network-1 10.30.0.0/16 10.255.30.0/24",
			},
		},
		{
			name: "env prefixes kind names",
			req:  Request{Clusters: 2, Env: "ci"},
			want: []string{
				"cluster1 ci-cluster1 network-1 10.10.0.0/16 10.255.10.0/24",
				"cluster2 ci-cluster2 network-1 10.20.0.0/16 10.255.20.0/24",
			},
		},
		{
			name: "explicit name prefix wins",
			req:  Request{Clusters: 1, Env: "ci", NamePrefix: &prefix},
			want: []string{"cluster1 x-cluster1 network-1 10.10.0.0/16 10.255.10.0/24"},
		},
		{
			name: "ipv6 gets distinct v6 subnets",
			req:  Request{Clusters: 2, IPFamily: IPv6},
			want: []string{
				"cluster1 cluster1 network-1 fd00:10:10::/56 fd00:10:255:10::/112",
				"cluster2 cluster2 network-1 fd00:10:20::/56 fd00:10:255:20::/112",
			},
		},
		{
			name: "dual stack",
			req:  Request{Clusters: 2, IPFamily: Dual},
			want: []string{
				"cluster1 cluster1 network-1 10.10.0.0/16,fd00:10:10::/56 10.255.10.0/24,fd00:10:255:10::/112",
				"cluster2 cluster2 network-1 10.20.0.0/16,fd00:10:20::/56 10.255.20.0/24,fd00:10:255:20::/112",
			},
		},
		{
			name: "twenty-five clusters fit the default subnets",
			req:  Request{Clusters: MaxGeneratedClusters},
		},
		{name: "zero defaults to one", req: Request{}, want: []string{"cluster1 cluster1 network-1 10.10.0.0/16 10.255.10.0/24"}},
		{name: "negative clusters", req: Request{Clusters: -2}, wantErr: "--clusters must be at least 1, got -2"},
		{name: "too many clusters", req: Request{Clusters: 26}, wantErr: "at most 25"},
		{name: "more networks than clusters", req: Request{Clusters: 2, Networks: 3}, wantErr: "--networks 3 exceeds --clusters 2"},
		{name: "negative networks", req: Request{Clusters: 2, Networks: -1}, wantErr: "--networks must be at least 1"},
		{name: "negative workers", req: Request{Clusters: 1, Workers: -1}, wantErr: `cluster "cluster1": workers must be 0 or more`},
		{name: "unknown family", req: Request{Clusters: 1, IPFamily: "v4"}, wantErr: `unknown ipFamily "v4"`},
		{name: "bad env", req: Request{Clusters: 1, Env: "My_Env"}, wantErr: `environment name "My_Env"`},
		{name: "kind name too long", req: Request{Clusters: 1, Env: strings.Repeat("e", 45)}, wantErr: "at most 49 characters"},
		{name: "registry port", req: Request{Clusters: 1, Registry: Registry{Enabled: true, Port: 70000}}, wantErr: "registry port 70000"},
		{name: "topology and count disagree", req: Request{Clusters: 2, Specs: []Spec{{Name: "a"}}}, wantErr: "--clusters 2 conflicts with a topology of 1"},
		{name: "topology and networks", req: Request{Networks: 2, Specs: []Spec{{Name: "a"}}}, wantErr: "--networks conflicts with a topology"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPlan(tt.req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if len(p.Clusters) != tt.req.Clusters {
					t.Fatalf("got %d clusters, want %d", len(p.Clusters), tt.req.Clusters)
				}
				return
			}
			var got []string
			for _, c := range p.Clusters {
				got = append(got, strings.Join([]string{c.Name, c.KindName, c.Network, strings.Join(c.PodSubnets, ","), strings.Join(c.ServiceSubnets, ",")}, " "))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestNewPlanReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := NewPlan(Request{Specs: []Spec{
		{Name: "a", PodSubnet: "10.10.0.0/16", ServiceSubnet: "bogus"},
		{Name: "b", PodSubnet: "10.10.0.0/16", PrimaryClusterName: "zzz"},
	}})
	ipe, ok := err.(*InvalidPlanError)
	if !ok {
		t.Fatalf("want *InvalidPlanError, got %T %v", err, err)
	}
	for _, want := range []string{`cluster "a": serviceSubnet "bogus" is not a CIDR`, `cluster "b": primaryClusterName "zzz"`, `cluster "a": podSubnet 10.10.0.0/16 overlaps cluster "b"`} {
		found := false
		for _, p := range ipe.Problems {
			found = found || strings.Contains(p, want)
		}
		if !found {
			t.Errorf("problems %q lack %q", ipe.Problems, want)
		}
	}
}

func TestKindConfig(t *testing.T) {
	t.Parallel()
	p, err := NewPlan(Request{Clusters: 2, Networks: 2, Workers: 2, IPFamily: Dual, Image: "meshctl/node:v1.34.4", Registry: Registry{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.KindConfig(p.Clusters[1])
	if cfg.Name != "cluster2" || cfg.Networking.IPFamily != "dual" || cfg.Networking.PodSubnet != "10.20.0.0/16,fd00:10:20::/56" {
		t.Errorf("networking: %+v", cfg.Networking)
	}
	if len(cfg.Nodes) != 3 || cfg.Nodes[0].Role != "control-plane" || cfg.Nodes[2].Role != "worker" {
		t.Fatalf("nodes: %+v", cfg.Nodes)
	}
	for _, n := range cfg.Nodes {
		if n.Image != "meshctl/node:v1.34.4" || n.Labels[LabelNetwork] != "network-2" || n.Labels[LabelEnv] != "default" {
			t.Errorf("node %+v", n)
		}
	}
	if len(cfg.ContainerdConfigPatches) != 1 || !strings.Contains(cfg.ContainerdConfigPatches[0], `config_path = "/etc/containerd/certs.d"`) {
		t.Errorf("registry patch: %q", cfg.ContainerdConfigPatches)
	}
	if len(cfg.KubeadmConfigPatches) != 4 || !strings.Contains(cfg.KubeadmConfigPatches[0], "PublicKeysECDSA: true") ||
		!strings.Contains(cfg.KubeadmConfigPatches[1], "encryptionAlgorithm: ECDSA-P256") ||
		!strings.Contains(cfg.KubeadmConfigPatches[2], `kube-api-qps: "200"`) {
		t.Errorf("kubeadm patches: %q", cfg.KubeadmConfigPatches)
	}
	checkControlPlanePatch(t, cfg.KubeadmConfigPatches[3], "https://127.0.0.1:2382")
	// The JSON patches must be RFC 6902 operations kind can decode, each
	// adding to a list kind's kubeadm config has, for both kubeadm APIs, or
	// adding a section kind's v1beta4 config lacks (etcd).
	targets := map[string]bool{}
	for _, jp := range cfg.KubeadmConfigPatchesJSON6902 {
		var ops []struct {
			Op    string `json:"op"`
			Path  string `json:"path"`
			Value any    `json:"value"`
		}
		if err := yaml.UnmarshalStrict([]byte(jp.Patch), &ops); err != nil {
			t.Fatalf("%s/%s %s: %v", jp.Group, jp.Version, jp.Kind, err)
		}
		for _, op := range ops {
			if op.Op != "add" || !strings.HasSuffix(op.Path, "/-") && op.Path != "/etcd" || op.Value == nil {
				t.Errorf("%s/%s %s: %+v", jp.Group, jp.Version, jp.Kind, op)
			}
			targets[jp.Version+" "+jp.Kind+" "+op.Path] = true
			if op.Path == "/etcd" {
				b, _ := yaml.Marshal(op.Value)
				if want := "local:\n  extraArgs:\n  - name: listen-client-http-urls\n    value: https://127.0.0.1:2382\n"; string(b) != want {
					t.Errorf("v1beta4 etcd section:\n%s\nwant:\n%s", b, want)
				}
			}
			if op.Path == "/controllerManager/extraArgs/-" {
				b, _ := yaml.Marshal(op.Value)
				targets["v1beta4 controllerManager "+strings.TrimSpace(string(b))] = true
			}
		}
	}
	for _, want := range []string{"v1beta3 InitConfiguration /skipPhases/-", "v1beta4 InitConfiguration /skipPhases/-",
		"v1beta4 ClusterConfiguration /controllerManager/extraArgs/-", "v1beta4 ClusterConfiguration /etcd",
		"v1beta4 controllerManager name: tls-cert-file\nvalue: /etc/kubernetes/pki/apiserver.crt",
		"v1beta4 controllerManager name: tls-private-key-file\nvalue: /etc/kubernetes/pki/apiserver.key"} {
		if !targets[want] {
			t.Errorf("no JSON patch %s among %v", want, targets)
		}
	}
	// an IPv6 cluster's etcd serves HTTP on IPv6 loopback, as kubeadm
	// puts its gRPC loopback URL there
	p6, err := NewPlan(Request{Clusters: 1, IPFamily: IPv6})
	if err != nil {
		t.Fatal(err)
	}
	cfg6 := p6.KindConfig(p6.Clusters[0])
	checkControlPlanePatch(t, cfg6.KubeadmConfigPatches[len(cfg6.KubeadmConfigPatches)-1], "https://[::1]:2382")
	if jp := cfg6.KubeadmConfigPatchesJSON6902[len(cfg6.KubeadmConfigPatchesJSON6902)-1]; !strings.Contains(jp.Patch, `value: "https://[::1]:2382"`) {
		t.Errorf("IPv6 v1beta4 patch: %s", jp.Patch)
	}
	p.Registry.Enabled = false
	if cfg := p.KindConfig(p.Clusters[0]); len(cfg.ContainerdConfigPatches) != 0 {
		t.Errorf("patch without registry: %q", cfg.ContainerdConfigPatches)
	}
}

// checkControlPlanePatch checks the v1beta3 merge patch that gives etcd
// its own HTTP port and the controller manager and scheduler a serving
// certificate (see controlPlanePatch).
func checkControlPlanePatch(t *testing.T, patch, etcdHTTP string) {
	t.Helper()
	type component struct {
		ExtraArgs    map[string]string `json:"extraArgs"`
		ExtraVolumes []struct {
			Name, HostPath, MountPath, PathType string
			ReadOnly                            bool
		} `json:"extraVolumes"`
	}
	var cc struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Etcd       struct {
			Local struct {
				ExtraArgs map[string]string `json:"extraArgs"`
			} `json:"local"`
		} `json:"etcd"`
		ControllerManager component `json:"controllerManager"`
		Scheduler         component `json:"scheduler"`
	}
	if err := yaml.UnmarshalStrict([]byte(patch), &cc); err != nil {
		t.Fatalf("control-plane patch: %v\n%s", err, patch)
	}
	if cc.APIVersion != "kubeadm.k8s.io/v1beta3" || cc.Kind != "ClusterConfiguration" {
		t.Errorf("control-plane patch for %s %s", cc.APIVersion, cc.Kind)
	}
	if got := cc.Etcd.Local.ExtraArgs; len(got) != 1 || got["listen-client-http-urls"] != etcdHTTP {
		t.Errorf("etcd extraArgs %v, want listen-client-http-urls=%s", got, etcdHTTP)
	}
	const crt, key = "/etc/kubernetes/pki/apiserver.crt", "/etc/kubernetes/pki/apiserver.key"
	for name, c := range map[string]component{"controllerManager": cc.ControllerManager, "scheduler": cc.Scheduler} {
		if len(c.ExtraArgs) != 2 || c.ExtraArgs["tls-cert-file"] != crt || c.ExtraArgs["tls-private-key-file"] != key {
			t.Errorf("%s extraArgs %v", name, c.ExtraArgs)
		}
	}
	// the controller manager's pod has /etc/kubernetes/pki; the scheduler's
	// gets the two files, read-only
	if len(cc.ControllerManager.ExtraVolumes) != 0 {
		t.Errorf("controllerManager extraVolumes %+v", cc.ControllerManager.ExtraVolumes)
	}
	mounted := map[string]bool{}
	for _, v := range cc.Scheduler.ExtraVolumes {
		if v.HostPath != v.MountPath || !v.ReadOnly || v.PathType != "File" || !strings.HasPrefix(v.Name, "meshctl-") {
			t.Errorf("scheduler volume %+v", v)
		}
		mounted[v.HostPath] = true
	}
	if len(mounted) != 2 || !mounted[crt] || !mounted[key] {
		t.Errorf("scheduler volumes %+v", cc.Scheduler.ExtraVolumes)
	}
}

func TestDiff(t *testing.T) {
	t.Parallel()
	p, _ := NewPlan(Request{Clusters: 1})
	have := p.Clusters[0]
	want := have
	if d := Diff(have, want); len(d) != 0 {
		t.Fatalf("identical plans differ: %v", d)
	}
	want.Workers = 2
	want.Network = "network-9"
	want.PodSubnets = []string{"10.99.0.0/16"}
	got := strings.Join(Diff(have, want), "; ")
	for _, w := range []string{"network: network-1 → network-9", "podSubnets: 10.10.0.0/16 → 10.99.0.0/16", "workers: 0 → 2"} {
		if !strings.Contains(got, w) {
			t.Errorf("diff %q lacks %q", got, w)
		}
	}
}
