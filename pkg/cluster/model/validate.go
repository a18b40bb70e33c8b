package model

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// maxKindNameLen keeps "<name>-control-plane" a valid 63-character hostname.
const maxKindNameLen = 63 - len("-control-plane")

// InvalidPlanError lists every problem found in a plan, so a user fixes a
// topology in one pass instead of one error per run.
type InvalidPlanError struct {
	Problems []string
}

func (e *InvalidPlanError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid topology: " + e.Problems[0]
	}
	return fmt.Sprintf("invalid topology (%d problems):\n  - %s", len(e.Problems), strings.Join(e.Problems, "\n  - "))
}

// Problems collects what is wrong with a plan, each naming its cluster, so
// that every check reports them the same way.
type Problems []string

// Add records a problem of cluster ("" for the environment as a whole).
func (p *Problems) Add(cluster, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if cluster != "" {
		msg = fmt.Sprintf("cluster %q: %s", cluster, msg)
	}
	*p = append(*p, msg)
}

// subnetRef is one subnet with what it belongs to, for overlap messages.
type subnetRef struct {
	cluster, field string
	prefix         netip.Prefix
	network        string
	existing       bool
}

// Err is nil when there are no problems, else an *InvalidPlanError listing them.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	return &InvalidPlanError{Problems: p}
}

// Validate checks the whole plan again: after Up discovered an existing
// cluster's subnets, which may clash with others on its network.
func (p *Plan) Validate() error { return p.validate(nil) }

// validate checks the whole plan, adding to the problems NewPlan found.
func (p *Plan) validate(errs Problems) error {
	if len(p.Clusters) == 0 {
		errs.Add("", "no clusters")
	}
	if msgs := validation.IsDNS1123Label(p.Env); len(msgs) > 0 {
		errs.Add("", "environment name %q: %s", p.Env, strings.Join(msgs, "; "))
	}
	if p.Registry.Enabled {
		if p.Registry.Port < 1 || p.Registry.Port > 65535 {
			errs.Add("", "registry port %d: want 1-65535", p.Registry.Port)
		}
		if msgs := validation.IsDNS1123Label(p.Registry.Name); len(msgs) > 0 {
			errs.Add("", "registry name %q: %s", p.Registry.Name, strings.Join(msgs, "; "))
		}
	}
	names := map[string]bool{}
	kindNames := map[string]bool{}
	var subnets []subnetRef
	for _, c := range p.Clusters {
		if names[c.Name] {
			errs.Add(c.Name, "duplicate cluster name")
		}
		names[c.Name] = true
		if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 {
			errs.Add(c.Name, "name is not a DNS-1123 label: %s", strings.Join(msgs, "; "))
		} else if c.Existing {
			// No kind name: nothing is created under one.
		} else if kindNames[c.KindName] {
			errs.Add(c.Name, "kind cluster name %q is used twice", c.KindName)
		} else if msgs := validation.IsDNS1123Label(c.KindName); len(msgs) > 0 || len(c.KindName) > maxKindNameLen {
			errs.Add(c.Name, "kind cluster name %q must be a DNS-1123 label of at most %d characters (node names add \"-control-plane\")", c.KindName, maxKindNameLen)
		}
		if !c.Existing {
			kindNames[c.KindName] = true
		}
		if c.Network == "" {
			errs.Add(c.Name, "network is empty")
		} else if msgs := validation.IsValidLabelValue(c.Network); len(msgs) > 0 {
			errs.Add(c.Name, "network %q is not a valid label value: %s", c.Network, strings.Join(msgs, "; "))
		}
		familyOK := true
		switch {
		case c.Existing:
			// Its family is what the cluster is: discovered, and
			// checked against stated subnets by Up, not here.
			familyOK = false
		default:
			if c.Workers < 0 {
				errs.Add(c.Name, "workers must be 0 or more, got %d", c.Workers)
			}
			if c.Image == "" {
				errs.Add(c.Name, "image is empty")
			}
			switch c.IPFamily {
			case IPv4, IPv6, Dual:
			default:
				familyOK = false
				errs.Add(c.Name, "unknown ipFamily %q: want ipv4, ipv6 or dual", c.IPFamily)
			}
		}
		for _, f := range []struct {
			field string
			cidrs []string
		}{{"podSubnet", c.PodSubnets}, {"serviceSubnet", c.ServiceSubnets}} {
			ps, ok := checkSubnets(&errs, c, f.field, f.cidrs, familyOK)
			if !ok {
				continue
			}
			for _, pr := range ps {
				subnets = append(subnets, subnetRef{c.Name, f.field, pr, c.Network, c.Existing})
			}
		}
	}
	for _, c := range p.Clusters {
		if c.PrimaryClusterName != c.Name {
			prim, ok := p.Cluster(c.PrimaryClusterName)
			switch {
			case !ok || prim.Name != c.PrimaryClusterName:
				errs.Add(c.Name, "primaryClusterName %q is not a cluster of this topology", c.PrimaryClusterName)
			case prim.PrimaryClusterName != prim.Name:
				errs.Add(c.Name, "primaryClusterName %q is itself a remote (of %q): a remote's primary must be a primary", prim.Name, prim.PrimaryClusterName)
			}
		}
		if c.ConfigClusterName != c.Name {
			if cfg, ok := p.Cluster(c.ConfigClusterName); !ok || cfg.Name != c.ConfigClusterName {
				errs.Add(c.Name, "configClusterName %q is not a cluster of this topology", c.ConfigClusterName)
			}
		}
	}
	checkExistingNetworks(&errs, p.Clusters)
	for i := range subnets {
		for j := i + 1; j < len(subnets); j++ {
			a, b := subnets[i], subnets[j]
			// An existing cluster's subnets are its own business unless
			// it shares a network (where pod addresses must be unique);
			// refusing a cloud cluster because it happens to use
			// 10.10.0.0/16 too would help nobody.
			if (a.existing || b.existing) && a.network != b.network {
				continue
			}
			if a.prefix.Overlaps(b.prefix) {
				other := fmt.Sprintf("cluster %q", b.cluster)
				if a.cluster == b.cluster {
					other = "its own"
				}
				errs.Add(a.cluster, "%s %s overlaps %s %s %s", a.field, a.prefix, other, b.field, b.prefix)
			}
		}
	}
	return errs.Err()
}

// checkExistingNetworks refuses an existing cluster on a kind cluster's
// network unless the topology says its pod network is routable. One network
// means, to Istio, that pods reach each other directly; meshctl makes that
// true for kind clusters by adding routes on every kind node, but it cannot
// change the routes of a cluster it does not own (its nodes are not on the
// kind docker network and meshctl does not run commands on them), so the
// mesh would send traffic to pod addresses nothing routes to.
func checkExistingNetworks(errs *Problems, cs []ClusterPlan) {
	kindOn := map[string]string{} // network → first kind cluster on it
	for _, c := range cs {
		if _, ok := kindOn[c.Network]; !ok && !c.Existing {
			kindOn[c.Network] = c.Name
		}
	}
	for _, c := range cs {
		kind, shared := kindOn[c.Network]
		if !c.Existing || !shared || c.PodNetworkRoutable {
			continue
		}
		errs.Add(c.Name, "existing cluster on network %q with kind cluster %q: meshctl routes pods only between kind clusters (it adds routes on kind nodes and cannot on an existing cluster's), so their pods could not reach each other as one network requires; "+
			"put %q on a network of its own (reached through an east-west gateway), or set meta.podNetworkRoutable: true if its pods and the kind nodes already route to each other", c.Network, kind, c.Name)
	}
}

// Size limits Kubernetes itself enforces: kube-controller-manager carves a
// /24 (v4) or /64 (v6) per node out of the pod subnet, and kube-apiserver
// refuses service ranges of more than 2^20 addresses.
var (
	minPodBits = map[bool]int{true: 24, false: 64}  // key: is4
	minSvcBits = map[bool]int{true: 12, false: 108} // prefix length at least
	// maxSvcBits: kubeadm gives the cluster DNS Service the range's 10th
	// address, so a range needs at least 16 (a /28, or a /124).
	maxSvcBits = map[bool]int{true: 28, false: 124}
)

// specialRanges are address ranges no pod or Service can use: packets to
// them never leave the node (loopback), are never routed (link-local,
// unspecified, reserved), go to groups (multicast), or are IPv4 in IPv6
// clothing (v4-mapped) that the kernel routes as IPv4.
var specialRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (\"this network\", 0.0.0.0/8)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback (127.0.0.0/8)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (169.254.0.0/16)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast (224.0.0.0/4)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (240.0.0.0/4)"},
	{netip.MustParsePrefix("::/128"), "unspecified (::)"},
	{netip.MustParsePrefix("::1/128"), "loopback (::1)"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "v4-mapped (::ffff:0:0/96)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local (fe80::/10)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast (ff00::/8)"},
}

// DockerBridge is the subnet of Docker's default bridge (docker0): a node
// sends packets for it to its local containers, never to another cluster.
var DockerBridge = netip.MustParsePrefix("172.17.0.0/16")

// checkSubnets parses one field's CIDRs and checks their count and families
// against the cluster's IP family.
func checkSubnets(errs *Problems, c ClusterPlan, field string, cidrs []string, familyOK bool) ([]netip.Prefix, bool) {
	if len(cidrs) == 0 {
		return nil, false // none to check (NewPlan said why, if it matters)
	}
	var out []netip.Prefix
	ok := true
	v4, v6 := 0, 0
	for _, s := range cidrs {
		pr, err := netip.ParsePrefix(s)
		if err != nil {
			errs.Add(c.Name, "%s %q is not a CIDR", field, s)
			ok = false
			continue
		}
		if pr.Masked() != pr {
			errs.Add(c.Name, "%s %s is not a network address (did you mean %s?)", field, s, pr.Masked())
			ok = false
			continue
		}
		if what := specialRange(pr); what != "" {
			errs.Add(c.Name, "%s %s overlaps the %s range: pods and Services need ordinary unicast addresses", field, s, what)
			ok = false
			continue
		}
		// An existing cluster's nodes are not kind containers: docker0
		// on this host means nothing to them.
		if !c.Existing && pr.Overlaps(DockerBridge) {
			errs.Add(c.Name, "%s %s overlaps Docker's default bridge %s (docker0): the kind nodes would send those packets to local containers", field, s, DockerBridge)
			ok = false
			continue
		}
		is4 := pr.Addr().Is4()
		if is4 {
			v4++
		} else {
			v6++
		}
		// An existing cluster's sizes are what its owner chose and
		// Kubernetes accepted (a node's podCIDR may be a /26).
		if !c.Existing && field == "podSubnet" && pr.Bits() > minPodBits[is4] {
			errs.Add(c.Name, "%s %s is too small: nodes get a /%d each, so it needs a prefix of /%d or shorter", field, s, minPodBits[is4], minPodBits[is4])
			ok = false
		}
		if !c.Existing && field == "serviceSubnet" && pr.Bits() < minSvcBits[is4] {
			errs.Add(c.Name, "%s %s is too large: Kubernetes allows at most a /%d", field, s, minSvcBits[is4])
			ok = false
		}
		if !c.Existing && field == "serviceSubnet" && pr.Bits() > maxSvcBits[is4] {
			errs.Add(c.Name, "%s %s is too small: kubeadm puts cluster DNS on its 10th address, so it needs a prefix of /%d or shorter", field, s, maxSvcBits[is4])
			ok = false
		}
		out = append(out, pr)
	}
	if !familyOK || !ok {
		return out, ok
	}
	want := map[string][2]int{IPv4: {1, 0}, IPv6: {0, 1}, Dual: {1, 1}}[c.IPFamily]
	if v4 != want[0] || v6 != want[1] {
		errs.Add(c.Name, "%s %q does not fit ipFamily %s: want %s", field, strings.Join(cidrs, ","), c.IPFamily, map[string]string{
			IPv4: "one IPv4 CIDR", IPv6: "one IPv6 CIDR", Dual: "an IPv4 and an IPv6 CIDR, comma-separated",
		}[c.IPFamily])
		return out, false
	}
	return out, true
}

// specialRange names the special range pr overlaps, or returns "".
func specialRange(pr netip.Prefix) string {
	for _, r := range specialRanges {
		if pr.Overlaps(r.prefix) {
			return r.what
		}
	}
	return ""
}
