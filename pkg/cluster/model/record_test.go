package model

import (
	"encoding/json"
	"testing"
)

// Records outlive the meshctl that wrote them (on a kind cluster's node, in
// an artifacts directory), and `meshctl list -o json` prints them: their
// format is kept byte for byte, whatever types hold them in memory. The
// fixtures are records as meshctl writes them: a kind cluster's with its
// load-balancer pools, an existing cluster's with what Up discovered.
func TestRecordFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, json string
		check      func(Record) string
	}{{
		name: "kind cluster",
		json: `{
  "env": "dev",
  "cluster": {
    "name": "cluster1",
    "kindName": "dev-cluster1",
    "network": "network-1",
    "roles": [
      "primary"
    ],
    "primaryClusterName": "cluster1",
    "configClusterName": "cluster1",
    "ipFamily": "ipv4",
    "podSubnets": [
      "10.10.0.0/16"
    ],
    "serviceSubnets": [
      "10.255.10.0/24"
    ],
    "controlPlanes": 1,
    "workers": 0,
    "image": "kindest/node:v1.34.0"
  },
  "meshctlVersion": "v0.1.0",
  "createdAt": "2026-12-01T10:00:00Z",
  "loadBalancerPools": {
    "dockerNetwork": "kind",
    "cidrs": [
      "172.18.255.224/28"
    ]
  }
}`,
		check: func(r Record) string {
			if r.Cluster.KindName != "dev-cluster1" || r.Cluster.Discovery != nil || r.Pools == nil || r.Pools.CIDRs[0] != "172.18.255.224/28" {
				return "the kind cluster's name, no discovery and its pools"
			}
			return ""
		},
	}, {
		name: "existing cluster",
		json: `{
  "env": "dev",
  "cluster": {
    "name": "cloud",
    "kindName": "",
    "network": "network-2",
    "roles": [
      "primary"
    ],
    "primaryClusterName": "cloud",
    "configClusterName": "cloud",
    "ipFamily": "ipv4",
    "podSubnets": [
      "10.30.0.0/16"
    ],
    "serviceSubnets": [
      "10.96.0.0/16"
    ],
    "controlPlanes": 0,
    "workers": 0,
    "image": "",
    "existing": true,
    "kubeconfig": "/home/dev/.kube/config",
    "context": "cloud",
    "discovery": {
      "server": "https://203.0.113.10:6443",
      "version": "v1.33.2",
      "nodes": 3,
      "podSubnetsFrom": "nodes' spec.podCIDRs (3 nodes)",
      "serviceSubnetsFrom": "ServiceCIDR kubernetes"
    }
  },
  "meshctlVersion": "v0.1.0",
  "createdAt": "2026-12-01T10:00:00Z"
}`,
		check: func(r Record) string {
			if !r.Cluster.Existing || r.Cluster.Kubeconfig != "/home/dev/.kube/config" || r.Cluster.Discovery == nil || r.Cluster.Discovery.Nodes != 3 || r.Pools != nil {
				return "the existing cluster's kubeconfig, its discovery and no pools"
			}
			return ""
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r Record
			if err := json.Unmarshal([]byte(tc.json), &r); err != nil {
				t.Fatal(err)
			}
			if want := tc.check(r); want != "" {
				t.Errorf("read %+v, want %s", r, want)
			}
			got, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.json {
				t.Errorf("written as\n%s\nwant\n%s", got, tc.json)
			}
		})
	}
}
