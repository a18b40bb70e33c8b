package model

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const topologyDir = "../../../testdata/topology"

// invalidFixtures maps every invalid-* fixture to what its error must say:
// the cluster and the field at fault.
var invalidFixtures = map[string][]string{
	"invalid-overlapping-pod-subnets.json":             {`cluster "one"`, "podSubnet 10.10.0.0/16 overlaps cluster \"two\" podSubnet 10.10.128.0/17"},
	"invalid-overlapping-service-subnets.json":         {`cluster "one"`, "serviceSubnet 10.255.10.0/24 overlaps cluster \"two\" serviceSubnet"},
	"invalid-pod-overlaps-own-services.json":           {`cluster "one"`, "podSubnet 10.10.0.0/16 overlaps its own serviceSubnet 10.10.1.0/24"},
	"invalid-cidr.json":                                {`cluster "one"`, `podSubnet "10.10.0.0/33" is not a CIDR`},
	"invalid-not-network-address.json":                 {`cluster "one"`, "not a network address (did you mean 10.10.0.0/16?)"},
	"invalid-duplicate-name.json":                      {`cluster "twin"`, "duplicate cluster name"},
	"invalid-name.json":                                {`cluster "Cluster_One"`, "not a DNS-1123 label"},
	"invalid-ip-family.json":                           {`cluster "one"`, `unknown ipFamily "ipv5"`},
	"invalid-family-mismatch.json":                     {`cluster "one"`, "podSubnet \"10.10.0.0/16\" does not fit ipFamily dual"},
	"invalid-missing-primary.json":                     {`cluster "remote"`, `primaryClusterName "nowhere" is not a cluster`},
	"invalid-primary-is-remote.json":                   {`cluster "c"`, `primaryClusterName "b" is itself a remote`},
	"invalid-negative-workers.json":                    {`cluster "one"`, "workers must be 0 or more, got -1"},
	"invalid-camel-snake-conflict.json":                {"clusterName is given twice"},
	"invalid-not-an-array.json":                        {"want an array of cluster entries"},
	"invalid-no-clusters.json":                         {"no Kubernetes clusters"},
	"invalid-missing-name.json":                        {"entry 0", "clusterName is required"},
	"invalid-pod-subnet-too-small.json":                {`cluster "one"`, "podSubnet 10.10.0.0/28 is too small"},
	"invalid-service-subnet-too-large.json":            {`cluster "one"`, "serviceSubnet 10.128.0.0/9 is too large"},
	"invalid-network-name.json":                        {`cluster "one"`, `network "not a label!" is not a valid label value`},
	"invalid-workers-type.json":                        {`cluster "one"`, "workers: want a whole number"},
	"invalid-existing-on-kind-network.json":            {`cluster "cloud"`, `existing cluster on network "network-1" with kind cluster "local"`, "meta.podNetworkRoutable: true"},
	"invalid-existing-kind-fields.json":                {`cluster "cloud"`, "workers applies to kind clusters", "image applies to kind clusters"},
	"invalid-existing-context-without-kubeconfig.json": {`entry 0 (cluster "cloud")`, "meta.context applies to an existing cluster: give meta.kubeconfig too"},
	"invalid-docker-bridge.json":                       {`cluster "one"`, "podSubnet 172.17.0.0/16 overlaps Docker's default bridge 172.17.0.0/16"},
	"invalid-loopback.json":                            {`cluster "one"`, "podSubnet 127.16.0.0/16 overlaps the loopback"},
	"invalid-link-local.json":                          {`cluster "one"`, "podSubnet 169.254.0.0/16 overlaps the link-local"},
	"invalid-multicast.json":                           {`cluster "one"`, "serviceSubnet ff05::/112 overlaps the multicast"},
	"invalid-unspecified.json":                         {`cluster "one"`, "podSubnet 0.0.0.0/16 overlaps the unspecified"},
	"invalid-v4-mapped.json":                           {`cluster "one"`, "podSubnet ::ffff:10.10.0.0/112 overlaps the v4-mapped"},
	"invalid-service-subnet-too-small.json":            {`cluster "one"`, "serviceSubnet 10.96.0.1/32 is too small", "/28 or shorter"},
	"invalid-too-many-default-subnets.json":            {`cluster "c26"`, "no podSubnet given: only the first 25 clusters of a topology get default subnets", "no svcSubnet given"},
	"invalid-too-many-entries.json":                    {"101 entries: a topology may have at most 100"},
	"invalid-kind-lowercase.json":                      {`entry 1 (cluster "two")`, `kind "kubernetes": write "Kubernetes"`},
	"invalid-duplicate-key.json":                       {"invalid-duplicate-key.json", `entry 1 (cluster "two")`, `key "podSubnet" is given twice`},
	"invalid-duplicate-key-nested.json":                {`entry 0 (cluster "cloud")`, `key "meta.kubeconfig" is given twice`},
	"invalid-duplicate-key.yaml":                       {"invalid-duplicate-key.yaml", `key "podSubnet" (line 5) is given twice`},
}

func loadPlan(path string) (*Plan, error) {
	specs, err := LoadTopology(path)
	if err != nil {
		return nil, err
	}
	return NewPlan(Request{Specs: specs, Registry: Registry{Enabled: true}})
}

func TestTopologyFixtures(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(topologyDir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", topologyDir, err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			plan, err := loadPlan(f)
			switch {
			case strings.HasPrefix(name, "valid-"):
				if err != nil {
					t.Fatalf("valid fixture rejected: %v", err)
				}
				if len(plan.Clusters) == 0 {
					t.Fatal("valid fixture planned no clusters")
				}
			case strings.HasPrefix(name, "invalid-"):
				want, ok := invalidFixtures[name]
				if !ok {
					t.Fatalf("invalid fixture %s has no expected error in invalidFixtures", name)
				}
				if err == nil {
					t.Fatalf("invalid fixture accepted: %+v", plan)
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q\ndoes not contain %q", err, w)
					}
				}
			default:
				t.Fatalf("fixture %s is neither valid-* nor invalid-*", name)
			}
		})
		seen[name] = true
	}
	for name := range invalidFixtures {
		if !seen[name] {
			t.Errorf("expected fixture %s is missing", name)
		}
	}
}

func TestParseTopologyIstioFixture(t *testing.T) {
	t.Parallel()
	// The shared fixture every tool of this project must accept.
	plan, err := loadPlan("../../../../shared/testdata/multicluster-3.json")
	if errors.Is(err, os.ErrNotExist) {
		plan, err = loadPlan(filepath.Join(topologyDir, "valid-istio-multicluster-3.json"))
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, network, primary string
		roles                  string
		pods, svcs             string
	}{
		{"primary", "network-1", "primary", "primary", "10.10.0.0/16", "10.255.10.0/24"},
		{"remote", "network-1", "primary", "remote", "10.20.0.0/16", "10.255.20.0/24"},
		{"cross-network-primary", "network-2", "cross-network-primary", "primary", "10.30.0.0/16", "10.255.30.0/24"},
	}
	if len(plan.Clusters) != len(want) {
		t.Fatalf("got %d clusters, want %d", len(plan.Clusters), len(want))
	}
	for i, w := range want {
		c := plan.Clusters[i]
		got := []string{c.Name, c.Network, c.PrimaryClusterName, strings.Join(c.Roles, ","), strings.Join(c.PodSubnets, ","), strings.Join(c.ServiceSubnets, ",")}
		exp := []string{w.name, w.network, w.primary, w.roles, w.pods, w.svcs}
		if strings.Join(got, " ") != strings.Join(exp, " ") {
			t.Errorf("cluster %d = %v, want %v", i, got, exp)
		}
	}
}

func TestParseTopologyForms(t *testing.T) {
	t.Parallel()
	snake, err := LoadTopology(filepath.Join(topologyDir, "valid-snake-case.json"))
	if err != nil {
		t.Fatal(err)
	}
	if snake[1].Name != "west" || snake[1].PrimaryClusterName != "east" || snake[1].Network != "network-1" || snake[1].PodSubnet != "10.20.0.0/16" || snake[1].ServiceSubnet != "10.255.20.0/24" {
		t.Errorf("snake_case aliases not read: %+v", snake[1])
	}
	vms, err := LoadTopology(filepath.Join(topologyDir, "valid-skips-vms.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Kubeconfig != "/tmp/work/primary" {
		t.Errorf("want the VM skipped and meta.kubeconfig kept, got %+v", vms)
	}
	y, err := LoadTopology(filepath.Join(topologyDir, "valid-yaml.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(y) != 2 || y[0].Workers == nil || *y[0].Workers != 1 || y[1].PodSubnet != "10.60.0.0/16" {
		t.Errorf("YAML topology misread: %+v", y)
	}
	if _, err := ParseTopology([]byte("   ")); err == nil || !strings.Contains(err.Error(), "empty topology") {
		t.Errorf("empty input: got %v", err)
	}
	if _, err := LoadTopology("does-not-exist.json"); err == nil || !strings.Contains(err.Error(), "does-not-exist.json") {
		t.Errorf("missing file: got %v", err)
	}
}

func TestExistingClustersInTopology(t *testing.T) {
	t.Parallel()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip(err)
	}
	plan, err := loadPlan(filepath.Join(topologyDir, "valid-existing-mixed.json"))
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(topologyDir)
	local, cloud, lab := plan.Clusters[0], plan.Clusters[1], plan.Clusters[2]
	if local.Existing || local.KindName != "local" || len(local.PodSubnets) != 1 {
		t.Errorf("kind cluster planned as %+v", local)
	}
	// The path is the topology file's, not the working directory's.
	if !cloud.Existing || cloud.Kubeconfig != filepath.Join(abs, "kubeconfigs/cloud.yaml") || cloud.Context != "gke_prod" {
		t.Errorf("cloud: %+v", cloud)
	}
	// Nothing of an existing cluster is meshctl's to default.
	if cloud.KindName != "" || cloud.Image != "" || cloud.IPFamily != "" || cloud.ControlPlanes != 0 || cloud.PodSubnets != nil || cloud.ServiceSubnets != nil {
		t.Errorf("cloud got kind defaults: %+v", cloud)
	}
	if strings.Join(cloud.Roles, ",") != RoleRemote || cloud.PrimaryClusterName != "local" {
		t.Errorf("cloud roles %v primary %q", cloud.Roles, cloud.PrimaryClusterName)
	}
	if !lab.Existing || lab.Kubeconfig != filepath.Join(home, ".kube/lab") || !lab.PodNetworkRoutable || strings.Join(lab.PodSubnets, ",") != "10.99.0.0/16" {
		t.Errorf("lab: %+v", lab)
	}
	if cfg := plan.KindConfig(local); cfg.Name != "local" {
		t.Errorf("kind config %+v", cfg)
	}
}

// A topology path that is not a regular file, or is huge, is refused before
// it is read: a FIFO would block forever, /dev/zero exhaust memory.
func TestLoadTopologyRefusesNonRegularAndHugeFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, []byte("["+strings.Repeat(" ", MaxTopologyBytes)+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "not a regular file (a named pipe)"},
		{"/dev/zero", "not a regular file (a character device)"},
		{huge, "larger than the limit of 4 MiB"},
	} {
		_, err := LoadTopology(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadTopology(%s) = %v, want an error naming it and saying %q", tc.path, err, tc.want)
		}
	}
}

// TestTopologyUnknownKeysWarn: an unknown key is no error — Istio's test
// framework ignores unknown keys, and one of the topology files Istio ships
// has one — but a warning naming the file, the entry and the key, with the
// key it was likely meant to be.
func TestTopologyUnknownKeysWarn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"valid-unknown-key-warns.json", []string{
			`topology ` + filepath.Join(topologyDir, "valid-unknown-key-warns.json") + `: entry 0 (cluster "one"): unknown key "podSubent" ignored (did you mean "podSubnet"?)`,
		}},
		{"valid-istio-shape-multicluster-large.json", []string{
			`valid-istio-shape-multicluster-large.json: entry 1 (cluster "east-remote"): unknown key "controlPlaneClusterName" ignored (Istio's test framework ignores it too`,
			`valid-istio-shape-multicluster-large.json: entry 4 (cluster "west-remote"): unknown key "controlPlaneClusterName" ignored`,
		}},
		{"valid-istio-shape-multicluster.json", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			plan, err := loadPlan(filepath.Join(topologyDir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Warnings) != len(tc.want) {
				t.Fatalf("warnings %q, want %d", plan.Warnings, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(plan.Warnings[i], w) {
					t.Errorf("warning %q\ndoes not contain %q", plan.Warnings[i], w)
				}
			}
		})
	}
}

// TestTopologyIstioKeyNames: every key Istio's scripts and framework accept
// means what it means there, snake_case included; controlPlaneClusterName is
// no such key (Istio's framework reads primaryClusterName only), so a
// cluster that has only it is its own primary, as in Istio.
func TestTopologyIstioKeyNames(t *testing.T) {
	t.Parallel()
	specs, err := ParseTopology([]byte(`[
	  {"cluster_name": "a", "pod_subnet": "10.10.0.0/16", "svc_subnet": "10.255.10.0/24", "network_id": "n1"},
	  {"clusterName": "b", "network": "n1", "primary_cluster_name": "a", "httpProxy": "http://proxy:3128", "proxyKubectlOnly": true, "meta": {"fakeVM": false}},
	  {"clusterName": "c", "network": "n1", "controlPlaneClusterName": "a"}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%s %s %s %s %s | %s %s %v | %s %q", specs[0].Name, specs[0].PodSubnet, specs[0].ServiceSubnet, specs[0].Network, specs[0].PrimaryClusterName,
		specs[1].Name, specs[1].PrimaryClusterName, specs[1].Warnings, specs[2].PrimaryClusterName, specs[2].Warnings)
	want := `a 10.10.0.0/16 10.255.10.0/24 n1  | b a [] |  ["entry 2 (cluster \"c\"): unknown key \"controlPlaneClusterName\" ignored (Istio's test framework ignores it too: the cluster's primary is primaryClusterName)"]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
