package gateway

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// maxClaimAttempts bounds how often claimPools starts over after its claim
// collided with one another meshctl made at the same moment.
const maxClaimAttempts = 8

// claimPools gives the kind clusters of env their pools on the docker
// network: blocks they hold are kept, the others get blocks no cluster of
// another environment holds. The result has one entry per plan (nil for
// existing clusters).
//
// Concurrency: two `meshctl up` started together on a fresh machine both see
// the same free blocks. A lock file on the host would not cover two CI
// containers that share only the docker socket, and docker offers no lock,
// so claims are optimistic instead: write the claim into the records, read
// every record again, and withdraw if a cluster of another environment now
// holds an overlapping block. Since each process writes before it reads, of
// two overlapping claims at least the later-written one sees the other, so
// two overlapping claims never both stand. Both may withdraw: each then
// retries after a random pause, searching from a random block, and sees the
// other's claim once it stands. A claim is never withdrawn after it stood:
// it stays with the cluster, for reruns, until the cluster is deleted.
func (i *Installer) claimPools(ctx context.Context, env string, plans []model.ClusterPlan, subnets []netip.Prefix) ([][]netip.Prefix, error) {
	for attempt := 1; ; attempt++ {
		all, err := i.source.List(cluster.WithFreshReads(ctx))
		if err != nil {
			return nil, fmt.Errorf("reading which load-balancer pools other environments hold: %w", err)
		}
		hs, unreadable := holders(all, i.network, subnets)
		if attempt == 1 && len(unreadable) > 0 {
			i.logger.Warnf("cannot read meshctl's record of kind clusters %s: load-balancer pools they may have are not avoided", strings.Join(unreadable, ", "))
		}
		reqs, idx, had := requests(env, plans, hs)
		if attempt > 1 {
			// Two claims that collided saw the same free blocks; picked the
			// same way again they would collide again. Retries start their
			// search at a random block instead: determinism matters when
			// nothing competes, not after a collision.
			for j := range reqs {
				reqs[j].prefer, reqs[j].from = 0, 1+uint64(rand.IntN(4*attempt*len(reqs)))
			}
		}
		var taken []holder
		for _, h := range hs {
			if h.env != env {
				taken = append(taken, h)
			}
		}
		got, err := allocate(i.network, subnets, i.poolSize, env, reqs, taken)
		if err != nil {
			return nil, err
		}
		pools := make([][]netip.Prefix, len(plans))
		for j, k := range idx {
			pools[k] = got[j]
		}
		var changed []int
		for k, p := range plans {
			if !p.Existing && !slices.Equal(pools[k], had[k]) {
				changed = append(changed, k)
			}
		}
		if len(changed) == 0 {
			return pools, nil
		}
		claim := func(k int) *model.Pools {
			p := &model.Pools{DockerNetwork: i.network}
			for _, x := range pools[k] {
				p.CIDRs = append(p.CIDRs, x.String())
			}
			return p
		}
		if err := i.record(ctx, plans, changed, claim); err != nil {
			return nil, err
		}
		clash, err := i.clash(ctx, env, pools, changed)
		if err != nil {
			return nil, err
		}
		if clash == "" {
			i.warnMoves(plans, changed, had, pools, previous(all), subnets)
			return pools, nil
		}
		// a withdrawal restores the record as it was: nil, for a cluster an
		// older meshctl connected, keeps its blocks inferred
		prev := previous(all)
		if err := i.record(ctx, plans, changed, func(k int) *model.Pools { return prev[plans[k].KindName] }); err != nil {
			return nil, fmt.Errorf("withdrawing a load-balancer pool claim that collided with %s: %w", clash, err)
		}
		if attempt == maxClaimAttempts {
			return nil, fmt.Errorf("docker network %q: the load-balancer pools claimed for environment %q collided %d times with those of another meshctl claiming at the same time (last: %s): rerun", i.network, env, attempt, clash)
		}
		i.logger.V(1).Infof("load-balancer pools collided with %s, claimed at the same time: trying again", clash)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(i.claimPause * time.Duration(1+rand.IntN(4*attempt))):
		}
	}
}

// requests are env's kind clusters, as indexes into plans, with the pools
// each holds (per plan, nil for existing clusters).
func requests(env string, plans []model.ClusterPlan, hs []holder) (reqs []request, idx []int, had [][]netip.Prefix) {
	recorded := map[string][]netip.Prefix{}
	for _, h := range hs {
		if h.env == env && !h.inferred {
			recorded[h.cluster] = h.pools
		}
	}
	had = make([][]netip.Prefix, len(plans))
	for k, p := range plans {
		if p.Existing {
			continue
		}
		had[k] = recorded[p.Name]
		reqs = append(reqs, request{name: p.Name, ipFamily: p.IPFamily, have: had[k], prefer: uint64(k + 1)})
		idx = append(idx, k)
	}
	return reqs, idx, had
}

// warnMoves says when a cluster's gateway address may change: its recorded
// pools left the docker network's subnets (the network was recreated), or
// an older meshctl gave it a block another environment holds now.
func (i *Installer) warnMoves(plans []model.ClusterPlan, changed []int, had, pools [][]netip.Prefix, prev map[string]*model.Pools, subnets []netip.Prefix) {
	chosen, _ := familySubnets(i.network, subnets)
	for _, k := range changed {
		p := plans[k]
		switch {
		case had[k] != nil:
			i.logger.Warnf("%s: load-balancer pools moved from %s to %s: the old ones are not in docker network %q's subnets", p.Name, join(had[k]), join(pools[k]), i.network)
		case prev[p.KindName] == nil:
			for _, s := range chosen {
				sp, err := newSpace(i.network, s, DefaultPoolSize)
				if err != nil || uint64(k+1) > sp.max || !wantsFamily(p.IPFamily, s) {
					continue
				}
				if old := sp.block(uint64(k + 1)); !slices.Contains(pools[k], old) {
					i.logger.Warnf("%s: an older meshctl gave it the load-balancer pool %s, which another environment holds: it moves to %s, and its gateway's address with it", p.Name, old, join(pools[k]))
				}
			}
		}
	}
}

// previous is each kind cluster's record of pools, by kind name.
func previous(all []cluster.Listed) map[string]*model.Pools {
	out := map[string]*model.Pools{}
	for _, e := range all {
		if e.Record != nil && e.KindName != "" {
			out[e.KindName] = e.Record.Pools
		}
	}
	return out
}

// record writes pools(k) into the records of the clusters changed.
func (i *Installer) record(ctx context.Context, plans []model.ClusterPlan, changed []int, pools func(int) *model.Pools) error {
	return parallel.ForEach(changed, func(k int) error {
		if err := i.source.SetPools(ctx, plans[k].KindName, pools(k)); err != nil {
			return fmt.Errorf("cluster %s: %w", plans[k].Name, err)
		}
		return nil
	})
}

// clash reads every record again and names a cluster of another
// environment whose recorded pools overlap those just claimed, or "".
func (i *Installer) clash(ctx context.Context, env string, pools [][]netip.Prefix, changed []int) (string, error) {
	all, err := i.source.List(cluster.WithFreshReads(ctx))
	if err != nil {
		return "", fmt.Errorf("reading which load-balancer pools other environments hold: %w", err)
	}
	hs, _ := holders(all, i.network, nil)
	for _, h := range hs {
		if h.env == env || h.inferred {
			continue
		}
		for _, k := range changed {
			for _, p := range pools[k] {
				for _, q := range h.pools {
					if p.Overlaps(q) {
						return fmt.Sprintf("cluster %s of environment %q (%s)", h.cluster, h.env, q), nil
					}
				}
			}
		}
	}
	return "", nil
}

func join(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
