package remotesecret

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

const testdata = "../../../testdata"

func topologyPlan(t *testing.T, req model.Request) []model.ClusterPlan {
	t.Helper()
	p, err := model.NewPlan(req)
	if err != nil {
		t.Fatal(err)
	}
	return p.Clusters
}

func fromFile(t *testing.T, name string) []model.ClusterPlan {
	t.Helper()
	specs, err := model.LoadTopology(filepath.Join(testdata, "topology", name))
	if err != nil {
		t.Fatal(err)
	}
	return topologyPlan(t, model.Request{Specs: specs})
}

// show renders pairs as "source→target" for readable failures.
func show(ps []pair) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.source+"→"+p.target)
	}
	return strings.Join(s, " ")
}

// TestPlanRoles is the table of who learns about whom, for every valid
// topology in testdata and the role combinations they lack.
func TestPlanRoles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		clusters func(t *testing.T) []model.ClusterPlan
		want     string
	}{
		{"one cluster needs none", func(t *testing.T) []model.ClusterPlan {
			return topologyPlan(t, model.Request{Clusters: 1})
		}, ""},
		{"multi-primary: every primary learns every other", func(t *testing.T) []model.ClusterPlan {
			return topologyPlan(t, model.Request{Clusters: 3, Networks: 2})
		}, "cluster2→cluster1 cluster3→cluster1 cluster1→cluster2 cluster3→cluster2 cluster1→cluster3 cluster2→cluster3"},
		{"valid-istio-multicluster-3.json: a remote is learnt by its primary and the other primary; it learns nothing", func(t *testing.T) []model.ClusterPlan {
			return fromFile(t, "valid-istio-multicluster-3.json")
		}, "primary→cross-network-primary remote→cross-network-primary cross-network-primary→primary remote→primary"},
		{"valid-multi-network.json: primary-remote across networks", func(t *testing.T) []model.ClusterPlan {
			return fromFile(t, "valid-multi-network.json")
		}, "cluster2→cluster1 cluster3→cluster1 cluster1→cluster2 cluster3→cluster2"},
		{"valid-snake-case.json: one primary, one remote", func(t *testing.T) []model.ClusterPlan {
			return fromFile(t, "valid-snake-case.json")
		}, "west→east"},
		{"valid-external-control-plane.json: the control plane's cluster learns the config and remote clusters", func(t *testing.T) []model.ClusterPlan {
			return fromFile(t, "valid-external-control-plane.json")
		}, "config→external remote→external"},
		{"Istio's external istiod: the config cluster is reached by istiod's own kubeconfig, the control plane's cluster is no mesh cluster", func(t *testing.T) []model.ClusterPlan {
			return topologyPlan(t, model.Request{Specs: []model.Spec{
				{Name: "external", ConfigClusterName: "config"},
				{Name: "config", PrimaryClusterName: "external", ConfigClusterName: "config"},
				{Name: "remote", PrimaryClusterName: "external", ConfigClusterName: "config"},
			}})
		}, "remote→external"},
		{"valid-dual-stack.json", func(t *testing.T) []model.ClusterPlan { return fromFile(t, "valid-dual-stack.json") }, "c2→c1 c1→c2"},
		{"valid-ipv6.json", func(t *testing.T) []model.ClusterPlan { return fromFile(t, "valid-ipv6.json") }, "v6b→v6a v6a→v6b"},
		{"valid-yaml.yaml", func(t *testing.T) []model.ClusterPlan { return fromFile(t, "valid-yaml.yaml") }, "beta→alpha alpha→beta"},
		{"valid-existing-mixed.json: existing clusters take part like kind ones", func(t *testing.T) []model.ClusterPlan {
			return fromFile(t, "valid-existing-mixed.json")
		}, "cloud→lab local→lab cloud→local lab→local"},
		{"valid-unknown-key-warns.json", func(t *testing.T) []model.ClusterPlan { return fromFile(t, "valid-unknown-key-warns.json") }, ""},
		{"valid-istio-shape-single.json", func(t *testing.T) []model.ClusterPlan { return fromFile(t, "valid-istio-shape-single.json") }, ""},
		{"valid-istio-shape-multicluster.json", func(t *testing.T) []model.ClusterPlan { return fromFile(t, "valid-istio-shape-multicluster.json") }, "east-remote→east west→east east→west east-remote→west"},
		{"valid-istio-shape-multicluster-large.json: controlPlaneClusterName is ignored, as by Istio, so every cluster is a primary", func(t *testing.T) []model.ClusterPlan {
			return fromFile(t, "valid-istio-shape-multicluster-large.json")
		}, "east-2→east-1 east-remote→east-1 west→east-1 west-remote→east-1 east-1→east-2 east-remote→east-2 west→east-2 west-remote→east-2 east-1→east-remote east-2→east-remote west→east-remote west-remote→east-remote east-1→west east-2→west east-remote→west west-remote→west east-1→west-remote east-2→west-remote east-remote→west-remote west→west-remote"},
		{"valid-istio-shape-external-istiod.json", func(t *testing.T) []model.ClusterPlan { return fromFile(t, "valid-istio-shape-external-istiod.json") }, ""},
		{"valid-istio-shape-external-istiod-multicluster.json", func(t *testing.T) []model.ClusterPlan {
			return fromFile(t, "valid-istio-shape-external-istiod-multicluster.json")
		}, "far→cp"},
		{"valid-istio-shape-ambient-multicluster.json", func(t *testing.T) []model.ClusterPlan {
			return fromFile(t, "valid-istio-shape-ambient-multicluster.json")
		}, "west→east east→west"},
		{"valid-skips-vms.json: a VM is no cluster", func(t *testing.T) []model.ClusterPlan { return fromFile(t, "valid-skips-vms.json") }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := show(plan(tt.clusters(t))); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestPlanCoversTestdata keeps the table above honest: every valid
// topology in testdata has a row.
func TestPlanCoversTestdata(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob(filepath.Join(testdata, "topology", "valid-*"))
	if len(files) == 0 {
		t.Fatal("no valid topologies found")
	}
	covered := map[string]bool{
		"valid-istio-multicluster-3.json": true, "valid-multi-network.json": true, "valid-snake-case.json": true,
		"valid-external-control-plane.json": true, "valid-dual-stack.json": true, "valid-ipv6.json": true,
		"valid-yaml.yaml": true, "valid-skips-vms.json": true, "valid-existing-mixed.json": true,
		"valid-unknown-key-warns.json":                        true,
		"valid-istio-shape-single.json":                       true,
		"valid-istio-shape-multicluster.json":                 true,
		"valid-istio-shape-multicluster-large.json":           true,
		"valid-istio-shape-external-istiod.json":              true,
		"valid-istio-shape-external-istiod-multicluster.json": true,
		"valid-istio-shape-ambient-multicluster.json":         true,
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no row in TestPlanRoles", filepath.Base(f))
		}
	}
}

// TestSecretServer: the server remote-secret prints is the one Ensure
// writes where the secret is held: the holder named (For), else the
// environment's holders, by address when one of them cannot resolve kind's
// node names.
func TestSecretServer(t *testing.T) {
	t.Parallel()
	kind := func(name, family string) model.ClusterPlan {
		return model.ClusterPlan{Name: name, KindName: "e-" + name, IPFamily: family, PrimaryClusterName: name, ConfigClusterName: name}
	}
	existing := func(name string) model.ClusterPlan {
		return model.ClusterPlan{Name: name, Existing: true, IPFamily: model.IPv4, PrimaryClusterName: name, ConfigClusterName: name}
	}
	remoteOf := func(c model.ClusterPlan, primary string) model.ClusterPlan {
		c.PrimaryClusterName, c.ConfigClusterName = primary, primary
		return c
	}
	// c1 is an external control plane, its mesh config in c2: no secret
	// gives access to it.
	unheld := []model.ClusterPlan{kind("c1", model.IPv4), kind("c2", model.IPv6)}
	for i := range unheld {
		unheld[i].PrimaryClusterName, unheld[i].ConfigClusterName = "c1", "c2"
	}
	if ps := show(plan(unheld)); strings.Contains(ps, "c1→") {
		t.Fatalf("c1 is held: %s", ps)
	}
	ep := endpoint{server: "by-name", byIP: "by-address"}
	tests := []struct {
		name     string
		clusters []model.ClusterPlan
		holder   string // For
		want     string // server, or the error's text
	}{
		{"IPv4 kind clusters resolve the names", []model.ClusterPlan{kind("c1", model.IPv4), kind("c2", model.IPv4), kind("c3", model.Dual)}, "", "by-name"},
		{"IPv6-only ones do not", []model.ClusterPlan{kind("c1", model.IPv6), kind("c2", model.IPv6)}, "", "by-address"},
		{"one holder that does not is enough: the address works from all", []model.ClusterPlan{kind("c1", model.IPv4), kind("c2", model.IPv4), existing("c3")}, "", "by-address"},
		{"for one that does", []model.ClusterPlan{kind("c1", model.IPv4), kind("c2", model.IPv4), existing("c3")}, "c2", "by-name"},
		{"for one that does, by its kind name", []model.ClusterPlan{kind("c1", model.IPv4), kind("c2", model.IPv4), existing("c3")}, "e-c2", "by-name"},
		{"for one that does not", []model.ClusterPlan{kind("c1", model.IPv4), kind("c2", model.IPv4), existing("c3")}, "c3", "by-address"},
		{"a remote holds no secret: not a holder", []model.ClusterPlan{kind("c1", model.IPv4), kind("c2", model.IPv4), remoteOf(existing("c3"), "c2")}, "", "by-name"},
		{"held by no cluster: the others decide", unheld, "", "by-address"},
		{"alone: its own kind decides", []model.ClusterPlan{kind("c1", model.IPv6)}, "", "by-address"},
		{"not for itself", []model.ClusterPlan{kind("c1", model.IPv4), kind("c2", model.IPv4)}, "c1", `cluster "c1" cannot hold a remote secret of itself`},
		{"not for a stranger", []model.ClusterPlan{kind("c1", model.IPv4), kind("c2", model.IPv4)}, "c9", `no cluster "c9" in environment "e" (it has c1, c2)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := holderOf(tt.clusters, "e", "c1", tt.holder)
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = ep.serverIn(h)
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
