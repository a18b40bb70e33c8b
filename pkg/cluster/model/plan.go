package model

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kind/pkg/apis/config/defaults"
)

// IP families, as kind spells them.
const (
	IPv4 = "ipv4"
	IPv6 = "ipv6"
	Dual = "dual"
)

// DefaultEnv is the environment used when none is named. Its clusters carry
// no name prefix, so `meshctl up --clusters 3` gives cluster1..cluster3 as
// Istio's scripts do.
const DefaultEnv = "default"

// MaxGeneratedClusters bounds --clusters: the default subnets step the
// second octet by ten (10.10.0.0/16 … 10.250.0.0/16).
const MaxGeneratedClusters = 25

// Request is what the user asked for. Either Specs (from a topology file) or
// Clusters (a count to generate) describes the clusters; the other fields
// apply to every cluster that does not say otherwise.
type Request struct {
	Env        string   `json:"env"`
	NamePrefix *string  `json:"namePrefix,omitempty"`
	Specs      []Spec   `json:"specs,omitempty"`
	Clusters   int      `json:"clusters,omitempty"`
	Networks   int      `json:"networks,omitempty"`
	Workers    int      `json:"workers"`
	IPFamily   string   `json:"ipFamily,omitempty"`
	Image      string   `json:"image,omitempty"`
	Registry   Registry `json:"registry"`
}

// Registry is the local image registry shared by an environment's clusters.
type Registry struct {
	Enabled bool   `json:"enabled"`
	Name    string `json:"name,omitempty"`
	Port    int    `json:"port,omitempty"`
	Image   string `json:"image,omitempty"`
}

// Registry defaults, as kind's local-registry guide and Istio's scripts use them.
const (
	DefaultRegistryName  = "kind-registry"
	DefaultRegistryPort  = 5000
	DefaultRegistryImage = "registry:2"
)

// Plan is a validated, fully defaulted environment: everything `up` will
// create, and what `up --dry-run` prints.
type Plan struct {
	Env      string        `json:"env"`
	Clusters []ClusterPlan `json:"clusters"`
	Registry Registry      `json:"registry"`
	// Warnings are what the topology held that meshctl ignored (unknown
	// keys), each naming the file, entry and key; callers show them.
	Warnings []string `json:"warnings,omitempty"`
}

// ClusterPlan is one cluster of a Plan: a kind cluster meshctl creates, or
// an Existing cluster it uses as it is.
type ClusterPlan struct {
	// Name is the cluster's name in the mesh (Istio's clusterName).
	Name string `json:"name"`
	// KindName is the kind cluster's name: Name with the environment prefix.
	// Empty for an existing cluster.
	KindName           string   `json:"kindName"`
	Network            string   `json:"network"`
	Roles              []string `json:"roles"`
	PrimaryClusterName string   `json:"primaryClusterName"`
	ConfigClusterName  string   `json:"configClusterName"`
	IPFamily           string   `json:"ipFamily"`
	PodSubnets         []string `json:"podSubnets"`
	ServiceSubnets     []string `json:"serviceSubnets"`
	ControlPlanes      int      `json:"controlPlanes"`
	Workers            int      `json:"workers"`
	Image              string   `json:"image"`

	// Existing marks a cluster named by a topology entry with
	// meta.kubeconfig: meshctl checks it, uses it and uninstalls what it put
	// there, and never creates or deletes it. It has no kind name, image or
	// node counts; its subnets and IP family are discovered from its API
	// server by Up (ClusterState.Discovery says from where), not defaulted.
	Existing bool `json:"existing,omitempty"`
	// Kubeconfig (absolute) and Context locate an existing cluster.
	Kubeconfig         string `json:"kubeconfig,omitempty"`
	Context            string `json:"context,omitempty"`
	PodNetworkRoutable bool   `json:"podNetworkRoutable,omitempty"`
}

// NewPlan defaults and validates a Request. Every problem found is reported
// at once, each naming its cluster and field, and nothing has been touched.
func NewPlan(req Request) (*Plan, error) {
	specs, err := expand(req)
	if err != nil {
		return nil, err
	}
	env := req.Env
	if env == "" {
		env = DefaultEnv
	}
	prefix := ""
	if env != DefaultEnv {
		prefix = env + "-"
	}
	if req.NamePrefix != nil {
		prefix = *req.NamePrefix
	}
	p := &Plan{Env: env, Registry: req.Registry}
	var errs Problems
	if p.Registry.Enabled {
		if p.Registry.Name == "" {
			p.Registry.Name = DefaultRegistryName
		}
		if p.Registry.Port == 0 {
			p.Registry.Port = DefaultRegistryPort
		}
		if p.Registry.Image == "" {
			p.Registry.Image = DefaultRegistryImage
		}
	} else {
		p.Registry = Registry{}
	}
	for i, s := range specs {
		p.Warnings = append(p.Warnings, s.Warnings...)
		c := ClusterPlan{
			Name:               s.Name,
			KindName:           prefix + s.Name,
			Network:            s.Network,
			PrimaryClusterName: s.PrimaryClusterName,
			ConfigClusterName:  s.ConfigClusterName,
			IPFamily:           firstNonEmpty(s.IPFamily, req.IPFamily, IPv4),
			ControlPlanes:      1,
			Workers:            req.Workers,
			Image:              firstNonEmpty(s.Image, req.Image, defaults.Image),
			Kubeconfig:         s.Kubeconfig,
		}
		if s.Workers != nil {
			c.Workers = *s.Workers
		}
		if c.Network == "" {
			c.Network = networkName(0)
		}
		if c.PrimaryClusterName == "" {
			c.PrimaryClusterName = c.Name
		}
		if c.ConfigClusterName == "" {
			c.ConfigClusterName = c.PrimaryClusterName
		}
		if s.Kubeconfig != "" {
			c, err = existingPlan(c, s, &errs)
			if err != nil {
				return nil, err
			}
			p.Clusters = append(p.Clusters, c)
			continue
		}
		// Defaults step the second octet by ten: past the 25th cluster
		// there are none left (10.260.0.0/16 is no address).
		if i >= MaxGeneratedClusters {
			for _, f := range []struct{ key, val string }{{"podSubnet", s.PodSubnet}, {"svcSubnet", s.ServiceSubnet}} {
				if f.val == "" {
					errs.Add(c.Name, "no %s given: only the first %d clusters of a topology get default subnets (10.10.0.0/16 … 10.250.0.0/16), and this is cluster %d: give it a %s", f.key, MaxGeneratedClusters, i+1, f.key)
				}
			}
		}
		if s.PodSubnet != "" || i < MaxGeneratedClusters {
			c.PodSubnets = defaultSubnets(s.PodSubnet, c.IPFamily, i, podSubnet)
		}
		if s.ServiceSubnet != "" || i < MaxGeneratedClusters {
			c.ServiceSubnets = defaultSubnets(s.ServiceSubnet, c.IPFamily, i, serviceSubnet)
		}
		c.Roles = roles(c)
		p.Clusters = append(p.Clusters, c)
	}
	if err := p.validate(errs); err != nil {
		return nil, err
	}
	return p, nil
}

// existingPlan turns a kind-defaulted ClusterPlan into an existing
// cluster's: no kind name, image, nodes or default subnets — nothing of it
// is meshctl's to choose. Subnets the topology states are kept, to be
// checked against what the cluster reports.
func existingPlan(c ClusterPlan, s Spec, errs *Problems) (ClusterPlan, error) {
	for _, f := range []struct {
		key string
		set bool
	}{{"workers", s.Workers != nil}, {"ipFamily", s.IPFamily != ""}, {"image", s.Image != ""}} {
		if f.set {
			errs.Add(c.Name, "%s applies to kind clusters; an existing cluster (meta.kubeconfig) is used as it is", f.key)
		}
	}
	path, err := filepath.Abs(s.Kubeconfig)
	if err != nil {
		return c, fmt.Errorf("cluster %q: meta.kubeconfig %s: %w", c.Name, s.Kubeconfig, err)
	}
	c.Existing, c.Kubeconfig, c.Context, c.PodNetworkRoutable = true, path, s.Context, s.PodNetworkRoutable
	c.KindName, c.Image, c.IPFamily = "", "", ""
	c.ControlPlanes, c.Workers = 0, 0
	c.PodSubnets, c.ServiceSubnets = splitSubnets(s.PodSubnet), splitSubnets(s.ServiceSubnet)
	c.Roles = roles(c)
	return c, nil
}

func splitSubnets(s string) []string {
	if s == "" {
		return nil
	}
	return defaultSubnets(s, "", 0, podSubnet)
}

// Cluster returns the planned cluster with the given mesh or kind name.
func (p *Plan) Cluster(name string) (ClusterPlan, bool) {
	for _, c := range p.Clusters {
		if c.Name == name || c.KindName == name {
			return c, true
		}
	}
	return ClusterPlan{}, false
}

// expand turns a Request into one Spec per cluster.
func expand(req Request) ([]Spec, error) {
	if len(req.Specs) > 0 {
		if req.Clusters != 0 && req.Clusters != len(req.Specs) {
			return nil, fmt.Errorf("--clusters %d conflicts with a topology of %d clusters: give one or the other", req.Clusters, len(req.Specs))
		}
		if req.Networks != 0 {
			return nil, fmt.Errorf("--networks conflicts with a topology: the topology names each cluster's network")
		}
		return req.Specs, nil
	}
	n, nets := req.Clusters, req.Networks
	if n == 0 {
		n = 1
	}
	if nets == 0 {
		nets = 1
	}
	switch {
	case n < 0:
		return nil, fmt.Errorf("--clusters must be at least 1, got %d", n)
	case n > MaxGeneratedClusters:
		return nil, fmt.Errorf("--clusters must be at most %d (the default subnets run out), got %d: use a topology file for more", MaxGeneratedClusters, n)
	case nets < 1:
		return nil, fmt.Errorf("--networks must be at least 1, got %d", nets)
	case nets > n:
		return nil, fmt.Errorf("--networks %d exceeds --clusters %d: every network needs a cluster", nets, n)
	}
	specs := make([]Spec, n)
	for i := range specs {
		// Round-robin, so that --networks 2 puts clusters 1 and 3 on
		// network-1 and cluster 2 on network-2.
		specs[i] = Spec{Name: fmt.Sprintf("cluster%d", i+1), Network: networkName(i % nets)}
	}
	return specs, nil
}

func networkName(i int) string { return fmt.Sprintf("network-%d", i+1) }

// roles derives what a cluster is from the primary/config names, as Istio's
// test framework does: a primary runs a control plane, a remote uses its
// primary's; a remote that holds the mesh config itself (an external control
// plane's config cluster) is also a config cluster.
func roles(c ClusterPlan) []string {
	if c.PrimaryClusterName == c.Name {
		return []string{RolePrimary}
	}
	if c.ConfigClusterName == c.Name {
		return []string{RoleRemote, RoleConfig}
	}
	return []string{RoleRemote}
}

type subnetKind int

const (
	podSubnet subnetKind = iota
	serviceSubnet
)

// defaultSubnets returns the explicit subnets if given, else the i-th
// cluster's default for the family: Istio's v4 defaults (pods 10.10.0.0/16,
// 10.20.0.0/16, …; services 10.255.10.0/24, …) and v6 ranges built the same
// way inside kind's fd00:10::/32 (pods fd00:10:10::/56, services
// fd00:10:255:10::/112, …).
func defaultSubnets(explicit, family string, i int, kind subnetKind) []string {
	if explicit != "" {
		var out []string
		for _, s := range strings.Split(explicit, ",") {
			out = append(out, strings.TrimSpace(s))
		}
		return out
	}
	step := 10 * (i + 1)
	v4 := fmt.Sprintf("10.%d.0.0/16", step)
	v6 := fmt.Sprintf("fd00:10:%d::/56", step)
	if kind == serviceSubnet {
		v4 = fmt.Sprintf("10.255.%d.0/24", step)
		v6 = fmt.Sprintf("fd00:10:255:%d::/112", step)
	}
	switch family {
	case IPv6:
		return []string{v6}
	case Dual:
		return []string{v4, v6}
	default:
		return []string{v4}
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Prefixes parses CIDRs that Validate has already checked, skipping any that are not CIDRs.
func Prefixes(cidrs []string) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p)
		}
	}
	return out
}
