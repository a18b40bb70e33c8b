package cluster

import (
	"bytes"
	"fmt"
	"strings"

	"sigs.k8s.io/kind/pkg/cluster/nodes"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster/internal/kindprovider"
	"github.com/meshctl/meshctl/pkg/cluster/internal/nodeboot"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// installBoot gives every node of a new kind cluster meshctl's boot unit
// (package nodeboot): after a restart, its pods are refused Service
// addresses kube-proxy has not rewritten yet, and its control plane takes
// over the leader leases of the start before at once. All nodes at once,
// one command each.
func installBoot(c model.ClusterPlan, ns []nodes.Node) error {
	pairs, err := nodeboot.Pairs(c.PodSubnets, c.ServiceSubnets)
	if err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	script := nodeboot.InstallScript(pairs)
	// Kubernetes nodes only: kind's load balancer in front of several
	// control planes (by kind's name for it: no docker inspect for a
	// role label) is a haproxy container, with no kubelet or systemd.
	// Plans have one control plane today; ClusterPlan.ControlPlanes and
	// InternalAPIServer already allow more.
	var kube []nodes.Node
	for _, n := range ns {
		if !strings.HasSuffix(n.String(), "-external-load-balancer") {
			kube = append(kube, n)
		}
	}
	return parallel.ForEach(kube, func(n nodes.Node) error {
		cmd := n.Command("sh", "-s")
		cmd.SetStdin(bytes.NewReader(script))
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("cluster %q: installing %s on node %s: %w", c.Name, nodeboot.UnitName, n, kindprovider.RunErr(err))
		}
		return nil
	})
}
