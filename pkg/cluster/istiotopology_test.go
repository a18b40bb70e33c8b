package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// TestUpWritesIstioTopology: up leaves, beside the kubeconfigs, the topology
// Istio's test framework takes (--istio.test.kube.topology) — the planned
// clusters in Istio's format with meta.kubeconfig — once with the host
// kubeconfigs and once with the internal ones; down removes both. (bench/
// reads it with Istio's framework code itself.)
func TestUpWritesIstioTopology(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	plan, err := model.NewPlan(model.Request{Env: "ext", Specs: []model.Spec{
		{Name: "cfg", Network: "net-a", PrimaryClusterName: "cp", ConfigClusterName: "cfg"},
		{Name: "cp", Network: "net-a", ConfigClusterName: "cfg"},
		{Name: "solo", Network: "net-b", IPFamily: model.Dual},
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.p.Up(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	for _, internal := range []bool{false, true} {
		path := e.p.TopologyPath("ext", internal)
		if want := filepath.Join(e.dir, "ext", map[bool]string{false: "topology.json", true: "topology-internal.json"}[internal]); path != want {
			t.Errorf("topology at %s, want %s", path, want)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var got []map[string]any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(got) != 3 {
			t.Fatalf("%s: %d entries", path, len(got))
		}
		for i, r := range res.Clusters {
			kc := r.Kubeconfig
			if internal {
				kc = r.InternalKubeconfig
			}
			if m, _ := got[i]["meta"].(map[string]any); m["kubeconfig"] != kc {
				t.Errorf("%s: %s's meta.kubeconfig %v, want %s", path, r.Name, got[i]["meta"], kc)
			}
		}
		want := []map[string]any{
			{"kind": "Kubernetes", "clusterName": "cfg", "network": "net-a", "primaryClusterName": "cp", "configClusterName": "cfg", "podSubnet": "10.10.0.0/16", "svcSubnet": "10.255.10.0/24"},
			{"kind": "Kubernetes", "clusterName": "cp", "network": "net-a", "primaryClusterName": "cp", "configClusterName": "cfg", "podSubnet": "10.20.0.0/16", "svcSubnet": "10.255.20.0/24"},
			{"kind": "Kubernetes", "clusterName": "solo", "network": "net-b", "podSubnet": "10.30.0.0/16,fd00:10:30::/56", "svcSubnet": "10.255.30.0/24,fd00:10:255:30::/112"},
		}
		for i, w := range want {
			delete(got[i], "meta")
			if len(got[i]) != len(w) {
				t.Errorf("%s entry %d: %v, want %v", path, i, got[i], w)
				continue
			}
			for k, v := range w {
				if got[i][k] != v {
					t.Errorf("%s entry %d: %s = %v, want %v", path, i, k, got[i][k], v)
				}
			}
		}
	}
	if _, err := e.p.Down(ctx, "ext"); err != nil {
		t.Fatal(err)
	}
	for _, internal := range []bool{false, true} {
		if _, err := os.Stat(e.p.TopologyPath("ext", internal)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("topology left behind by down: %v", err)
		}
	}
}
