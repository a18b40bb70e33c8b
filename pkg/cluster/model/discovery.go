package model

import "net/netip"

// Discovery is what Up learned of an existing cluster from its API server.
// Its subnets are read, never defaulted; the *From fields say where from,
// because a person debugging a mesh needs to know how much to trust them.
type Discovery struct {
	Server             string `json:"server"`
	Version            string `json:"version"`
	Nodes              int    `json:"nodes"`
	PodSubnetsFrom     string `json:"podSubnetsFrom"`
	ServiceSubnetsFrom string `json:"serviceSubnetsFrom"`
	// ServiceSubnetsInferred is set when the cluster does not serve the
	// ServiceCIDR API: the range is then inferred from the kubernetes
	// Service's address and is an upper bound.
	ServiceSubnetsInferred bool `json:"serviceSubnetsInferred,omitempty"`
}

// ManagedBy is the label meshctl puts on every object it creates in a
// cluster; `down` deletes what carries it from existing clusters.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "meshctl"
)

// The claim meshctl writes into an existing cluster: which environment (and
// mesh name) uses it. `up` of another environment refuses the cluster, and
// `down` of another environment leaves it alone, so that one environment's
// down never uninstalls what another installed.
const (
	ClaimNamespace = "meshctl-system"
	ClaimName      = "meshctl-cluster"
)

// InferServiceCIDR is the largest service range Kubernetes allows (/12 for
// IPv4, /108 for IPv6) that starts right before ip, the address the API
// server gives the kubernetes Service: the first of its range. The true
// range is inside it; its size is not readable.
func InferServiceCIDR(ip netip.Addr) netip.Prefix {
	base := ip.Prev()
	for bits := minSvcBits[ip.Is4()]; bits < ip.BitLen(); bits++ {
		if pr := netip.PrefixFrom(base, bits); pr.Masked().Addr() == base {
			return pr
		}
	}
	return netip.PrefixFrom(ip, ip.BitLen())
}

// FamilyOf names the IP family of a set of CIDRs, "" when there are none.
func FamilyOf(cidrs []string) string {
	v4, v6 := false, false
	for _, p := range Prefixes(cidrs) {
		v4 = v4 || p.Addr().Is4()
		v6 = v6 || !p.Addr().Is4()
	}
	switch {
	case v4 && v6:
		return Dual
	case v6:
		return IPv6
	case v4:
		return IPv4
	}
	return ""
}
