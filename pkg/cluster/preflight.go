package cluster

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// ErrNoDocker means the Docker engine did not answer.
var ErrNoDocker = errors.New("cannot reach the Docker engine")

// KindNetwork is the docker network kind puts every node on, as kind names it.
func KindNetwork() string {
	if n := os.Getenv("KIND_EXPERIMENTAL_DOCKER_NETWORK"); n != "" {
		return n
	}
	return "kind"
}

// Preflight checks what `up` needs before it changes anything: a Docker
// engine that answers, and planned subnets that do not overlap the kind
// docker network (traffic to pods would be routed into the bridge instead).
func (p *Provider) Preflight(ctx context.Context, plan *model.Plan) error {
	if err := p.checkDocker(ctx); err != nil {
		return err
	}
	subnets, err := p.networkSubnets(ctx, KindNetwork())
	if err != nil {
		return err
	}
	what := fmt.Sprintf("the docker network %q", KindNetwork())
	if subnets == nil {
		subnets = KindNetworkCandidates(KindNetwork())
		what = fmt.Sprintf("a subnet Docker or kind may give the docker network %q (not created yet)", KindNetwork())
	}
	var errs model.Problems
	for _, c := range plan.Clusters {
		for _, f := range []struct {
			field string
			cidrs []string
		}{{"podSubnet", c.PodSubnets}, {"serviceSubnet", c.ServiceSubnets}} {
			for _, pr := range model.Prefixes(f.cidrs) {
				for _, n := range subnets {
					if pr.Overlaps(n) {
						errs.Add(c.Name, "%s %s overlaps %s (%s)", f.field, pr, what, n)
					}
				}
			}
		}
	}
	return errs.Err()
}

// networkSubnets returns a docker network's subnets, or none when the
// network does not exist yet (kind creates it with the first cluster).
func (p *Provider) networkSubnets(ctx context.Context, name string) ([]netip.Prefix, error) {
	out, err := p.docker.Run(ctx, "network", "ls", "--filter", "name=^"+name+"$", "--format", "{{.Name}}")
	if err != nil {
		return nil, fmt.Errorf("listing docker networks: %w", err)
	}
	if strings.TrimSpace(string(out)) == "" {
		return nil, nil
	}
	out, err = p.docker.Run(ctx, "network", "inspect", name, "--format", "{{json .IPAM.Config}}")
	if err != nil {
		return nil, fmt.Errorf("inspecting docker network %q: %w", name, err)
	}
	var cfg []struct{ Subnet string }
	if err := json.Unmarshal(out, &cfg); err != nil {
		return nil, fmt.Errorf("docker network %q: unexpected IPAM config %q: %w", name, out, err)
	}
	var ps []netip.Prefix
	for _, c := range cfg {
		if pr, err := netip.ParsePrefix(c.Subnet); err == nil {
			ps = append(ps, pr)
		}
	}
	return ps, nil
}

// KindNetworkCandidates are the subnets the kind network may get when kind
// creates it with the first cluster, so that a plan is checked against it
// before it exists. IPv4: kind leaves the choice to Docker's IPAM, whose
// default address pools hand out 172.17.0.0/16 … 172.31.0.0/16 first (the
// 192.168.0.0/16 pools only once all of those are taken, which a plan
// cannot foresee). IPv6: kind derives a ULA /64 from the network's name and
// probes up to five of them (sigs.k8s.io/kind
// pkg/cluster/internal/providers/docker/network.go,
// generateULASubnetFromName); this is the same derivation.
func KindNetworkCandidates(name string) []netip.Prefix {
	var out []netip.Prefix
	for i := 17; i <= 31; i++ {
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(i), 0, 0}), 16))
	}
	for attempt := int32(0); attempt < 5; attempt++ {
		h := sha1.New()
		h.Write([]byte(name))
		_ = binary.Write(h, binary.LittleEndian, attempt)
		sum := h.Sum(nil)
		var ip [16]byte
		ip[0] = 0xfc
		copy(ip[2:8], sum[2:8])
		out = append(out, netip.PrefixFrom(netip.AddrFrom16(ip), 64))
	}
	return out
}
