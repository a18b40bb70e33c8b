package model

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"
)

// Record is what meshctl writes on a cluster it created (and, locally, of
// an existing cluster it uses).
type Record struct {
	Env       string       `json:"env"`
	Cluster   ClusterState `json:"cluster"`
	Version   string       `json:"meshctlVersion"`
	CreatedAt time.Time    `json:"createdAt"`
	// Pools are the MetalLB address pools pkg/connect/gateway gave the
	// cluster. They live in the record because every meshctl on the machine
	// reads every kind cluster's record anyway (List): that is how an
	// environment finds the blocks other environments hold on the shared
	// docker network, without credentials for their clusters.
	Pools *Pools `json:"loadBalancerPools,omitempty"`
}

// Pools are a kind cluster's load-balancer address pools, one CIDR per IP
// family, carved from a docker network.
type Pools struct {
	DockerNetwork string   `json:"dockerNetwork"`
	CIDRs         []string `json:"cidrs"`
}

// Diff lists how a kind cluster already there (have, from its record)
// differs from what is planned for it, one "field: have → want" line per
// difference.
func Diff(have, want ClusterPlan) []string {
	var d []string
	field := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			d = append(d, fmt.Sprintf("%s: %v → %v", name, show(a), show(b)))
		}
	}
	field("network", have.Network, want.Network)
	field("primaryClusterName", have.PrimaryClusterName, want.PrimaryClusterName)
	field("configClusterName", have.ConfigClusterName, want.ConfigClusterName)
	field("ipFamily", have.IPFamily, want.IPFamily)
	field("podSubnets", have.PodSubnets, want.PodSubnets)
	field("serviceSubnets", have.ServiceSubnets, want.ServiceSubnets)
	field("controlPlanes", have.ControlPlanes, want.ControlPlanes)
	field("workers", have.Workers, want.Workers)
	field("image", have.Image, want.Image)
	sort.Strings(d)
	return d
}

func show(v any) string {
	if s, ok := v.([]string); ok {
		return strings.Join(s, ",")
	}
	return fmt.Sprint(v)
}
