package istiocharts

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/install/values"
)

const topologyDir = "../../testdata/topology"

func shapePlan(t *testing.T, file string) *model.Plan {
	t.Helper()
	return loadPlan(t, filepath.Join(topologyDir, file))
}

func loadPlan(t *testing.T, path string) *model.Plan {
	t.Helper()
	specs, err := model.LoadTopology(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := model.NewPlan(model.Request{Specs: specs})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p
}

// TestIstioTopologiesLoad: every topology file Istio ships loads; the one
// with a key Istio's framework ignores (controlPlaneClusterName) loads with
// a warning naming file, entry and key.
func TestIstioTopologiesLoad(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(moduleDir(t), "prow/config/topology/*.json"))
	if err != nil || len(files) < 6 {
		t.Fatalf("Istio's topology files: %v %v", files, err)
	}
	for _, f := range files {
		p := loadPlan(t, f)
		warned := strings.Join(p.Warnings, "\n")
		if filepath.Base(f) == "multicluster-large.json" {
			if !strings.Contains(warned, f+`: entry 1 (cluster "remote"): unknown key "controlPlaneClusterName" ignored`) {
				t.Errorf("%s: warnings %q", f, p.Warnings)
			}
		} else if warned != "" {
			t.Errorf("%s: warnings %q", f, p.Warnings)
		}
		if _, err := values.New().Render(p); err != nil {
			t.Errorf("%s: values render: %v", f, err)
		}
	}
}

// TestIstiodChartPerRole renders Istio's istiod chart with the values
// `meshctl values render` gives each cluster of each of Istio's topology
// shapes (testdata/topology/valid-istio-shape-*.json), and checks what each
// role must install: a control plane with the cluster's CLUSTER_ID, network
// and meshNetworks (EXTERNAL_ISTIOD where it serves other clusters), or, on
// a remote or config cluster, the remote profile's objects — istiod's
// Service and EndpointSlice pointing at the primary, the injection webhook
// with the cluster's path, and no Deployment.
func TestIstiodChartPerRole(t *testing.T) {
	t.Parallel()
	shapes, err := filepath.Glob(filepath.Join(topologyDir, "valid-istio-shape-*.json"))
	if err != nil || len(shapes) != 6 {
		t.Fatalf("want the six shapes: %v %v", shapes, err)
	}
	for _, shape := range shapes {
		t.Run(filepath.Base(shape), func(t *testing.T) {
			t.Parallel()
			p := loadPlan(t, shape)
			var opts []values.Option
			addrs := map[string]string{}
			for i, c := range p.Clusters {
				if r := values.RoleOf(p, c); r == values.RolePrimaryOfRemotes || r == values.RoleExternal {
					addrs[c.Name] = fmt.Sprintf("172.18.200.%d", i+1)
					opts = append(opts, values.WithIstiodAddress(c.Name, addrs[c.Name]))
				}
			}
			rendered, err := values.New(append(opts, values.WithKnownAddresses(true))...).Render(p)
			if err != nil {
				t.Fatal(err)
			}
			istiod := loadChart(t, "istio-control/istio-discovery")
			for i, rc := range rendered {
				c := p.Clusters[i]
				objs := map[string]object{}
				for _, o := range render(t, istiod, "istiod", rc.Values) {
					objs[o.key()] = o
				}
				checkRole(t, p, c, rc.Role, objs, addrs[c.PrimaryClusterName])
			}
		})
	}
}

func checkRole(t *testing.T, p *model.Plan, c model.ClusterPlan, role values.Role, objs map[string]object, primaryAddr string) {
	t.Helper()
	name := fmt.Sprintf("%s (%s)", c.Name, role)
	dep, hasDep := objs["Deployment istio-system/istiod"]
	switch role {
	case values.RoleRemote, values.RoleConfig:
		if hasDep {
			t.Errorf("%s: the remote profile installs no istiod Deployment", name)
		}
		if _, ok := objs["Service istio-system/istiod"]; !ok {
			t.Errorf("%s: no istiod Service", name)
		}
		eps, ok := objs["EndpointSlice istio-system/istiod-remote"]
		if !ok {
			for k := range objs {
				if strings.HasPrefix(k, "EndpointSlice ") {
					eps, ok = objs[k], true
				}
			}
		}
		if !ok || !strings.Contains(jsonOf(eps.raw), `"addresses":["`+primaryAddr+`"]`) {
			t.Errorf("%s: no EndpointSlice for istiod at %s (primary %s): %s", name, primaryAddr, c.PrimaryClusterName, jsonOf(eps.raw))
		}
		wh, ok := objs["MutatingWebhookConfiguration /istio-sidecar-injector"]
		wantPath := fmt.Sprintf(`"path":"/inject/cluster/%s/net/%s"`, c.Name, c.Network)
		if !ok || !strings.Contains(jsonOf(wh.raw), wantPath) {
			t.Errorf("%s: injection webhook without %s: %s", name, wantPath, jsonOf(wh.raw))
		}
		if role == values.RoleConfig {
			checkMeshNetworks(t, name, p, objs)
		}
		return
	}
	if !hasDep {
		t.Fatalf("%s: no istiod Deployment", name)
	}
	env := containerEnv(dep)
	wantID := c.Name
	if role == values.RoleExternal {
		wantID = c.ConfigClusterName
	}
	if env["CLUSTER_ID"] != wantID {
		t.Errorf("%s: CLUSTER_ID %q, want %q", name, env["CLUSTER_ID"], wantID)
	}
	wantExternal := role == values.RolePrimaryOfRemotes || role == values.RoleExternal
	if (env["EXTERNAL_ISTIOD"] == "true") != wantExternal {
		t.Errorf("%s: EXTERNAL_ISTIOD %q, want set: %v", name, env["EXTERNAL_ISTIOD"], wantExternal)
	}
	if inj, ok := objs["ConfigMap istio-system/istio-sidecar-injector"]; ok {
		if !strings.Contains(jsonOf(inj.raw), `\"network\": \"`+c.Network+`\"`) {
			t.Errorf("%s: injector values have no network %q", name, c.Network)
		}
	} else if role != values.RoleExternal {
		t.Errorf("%s: no istio-sidecar-injector ConfigMap", name)
	}
	checkMeshNetworks(t, name, p, objs)
}

// checkMeshNetworks: the mesh config's meshNetworks lists every cluster as
// a registry of its network.
func checkMeshNetworks(t *testing.T, name string, p *model.Plan, objs map[string]object) {
	t.Helper()
	cm, ok := objs["ConfigMap istio-system/istio"]
	if !ok {
		t.Errorf("%s: no istio ConfigMap", name)
		return
	}
	data, _ := cm.raw["data"].(map[string]any)
	var mn struct {
		Networks map[string]struct {
			Endpoints []map[string]string `json:"endpoints"`
		} `json:"networks"`
	}
	if err := yaml.Unmarshal([]byte(fmt.Sprint(data["meshNetworks"])), &mn); err != nil {
		t.Errorf("%s: meshNetworks: %v", name, err)
		return
	}
	for _, c := range p.Clusters {
		found := false
		for _, e := range mn.Networks[c.Network].Endpoints {
			found = found || e["fromRegistry"] == c.Name
		}
		if !found {
			t.Errorf("%s: meshNetworks has no registry %s in network %s: %v", name, c.Name, c.Network, data["meshNetworks"])
		}
	}
}

func containerEnv(dep object) map[string]string {
	var d struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Env []struct {
							Name  string `json:"name"`
							Value string `json:"value"`
						} `json:"env"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	_ = json.Unmarshal([]byte(jsonOf(dep.raw)), &d)
	out := map[string]string{}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			out[e.Name] = e.Value
		}
	}
	return out
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
