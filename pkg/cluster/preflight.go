package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
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
func (p *Provider) Preflight(ctx context.Context, plan *Plan) error {
	if err := p.checkDocker(ctx); err != nil {
		return err
	}
	subnets, err := p.networkSubnets(ctx, KindNetwork())
	if err != nil {
		return err
	}
	var errs problems
	for _, c := range plan.Clusters {
		for _, f := range []struct {
			field string
			cidrs []string
		}{{"podSubnet", c.PodSubnets}, {"serviceSubnet", c.ServiceSubnets}} {
			for _, pr := range prefixes(f.cidrs) {
				for _, n := range subnets {
					if pr.Overlaps(n) {
						errs.add(c.Name, "%s %s overlaps the docker network %q (%s)", f.field, pr, KindNetwork(), n)
					}
				}
			}
		}
	}
	if len(errs) > 0 {
		return &InvalidPlanError{Problems: errs}
	}
	return nil
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
