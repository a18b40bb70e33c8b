package app

import (
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// Printing of existing (non-kind) clusters, shared by up, status, list and
// down.

func kindNameOrExisting(kindName string) string {
	if kindName == "" {
		return "(existing)"
	}
	return kindName
}

// kindConfigOf is the kind config of a kind cluster, none for an existing one.
func kindConfigOf(p *model.Plan, c model.ClusterPlan) *v1alpha4.Cluster {
	if c.Existing {
		return nil
	}
	return p.KindConfig(c)
}

// describeCluster says what a cluster is, for status.
func describeCluster(c model.ClusterState) string {
	if !c.Existing {
		return "kind cluster " + c.KindName
	}
	s := "existing cluster, kubeconfig " + c.Kubeconfig
	if c.Context != "" {
		s += " context " + c.Context
	}
	if d := c.Discovery; d != nil {
		s += fmt.Sprintf(", %s at %s", d.Version, d.Server)
	}
	return s
}

func printExistingPlan(w io.Writer, c model.ClusterPlan) {
	fmt.Fprintf(w, "\n%s (existing cluster: used as it is, never created or deleted)\n", c.Name)
	fmt.Fprintf(w, "  network:          %s\n", c.Network)
	fmt.Fprintf(w, "  roles:            %s\n", strings.Join(c.Roles, ", "))
	fmt.Fprintf(w, "  kubeconfig:       %s\n", c.Kubeconfig)
	if c.Context != "" {
		fmt.Fprintf(w, "  context:          %s\n", c.Context)
	}
	fmt.Fprintln(w, "  subnets:          discovered from the cluster by up")
}

func printUninstalled(w io.Writer, us []cluster.Uninstalled) {
	for _, u := range us {
		what := "cluster"
		if u.Existing {
			what = "existing cluster"
		}
		if len(u.Objects) == 0 {
			fmt.Fprintf(w, "Kept %s %s: nothing of meshctl's was left in it.\n", what, u.Cluster)
			continue
		}
		fmt.Fprintf(w, "Kept %s %s; removed what meshctl installed: %s.\n", what, u.Cluster, strings.Join(u.Objects, ", "))
	}
}

// printDiscovery says where an existing cluster's subnets come from.
func printDiscovery(w io.Writer, c model.ClusterState) {
	if d := c.Discovery; d != nil {
		fmt.Fprintf(w, "  pods from %s; services from %s\n", d.PodSubnetsFrom, d.ServiceSubnetsFrom)
	}
}
