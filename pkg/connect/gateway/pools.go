package gateway

import (
	"fmt"
	"math/bits"
	"net/netip"
	"sort"
	"strings"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// DefaultPoolSize is how many addresses each cluster's pool gets, per IP
// family: one for the east-west gateway and room for a few more
// LoadBalancer services a developer may add.
const DefaultPoolSize = 16

// Pools are aligned blocks counted down from the top of the docker
// network's subnet, because docker hands out container addresses from the
// bottom; block 0, the topmost, is skipped (it holds the IPv4 broadcast
// address), and pools use at most the top half of a subnet: the bottom half
// stays for nodes and other containers.
//
// Every kind cluster on the docker network shares it, whatever its
// environment, so the blocks are allocated machine-wide: each cluster's
// blocks are recorded in meshctl's record of it (model.Record.Pools), and
// an environment gets blocks no other cluster holds.

// holder is a kind cluster holding pools on the docker network.
type holder struct {
	env, cluster string
	pools        []netip.Prefix
	// inferred pools were never recorded: an older meshctl connected the
	// environment and gave cluster k (in name order) block k+1.
	inferred bool
}

// request is one kind cluster of the environment being connected.
type request struct {
	name     string
	ipFamily string
	// have are the cluster's recorded pools: kept, so that reruns never
	// move a gateway's address.
	have []netip.Prefix
	// prefer is the block the cluster gets when it holds none and the
	// block is free: its position in the environment plus one, as meshctl
	// gave it before pools were recorded — so an environment connected by
	// an older meshctl keeps its pools, and one alone on the machine gets
	// the same pools as ever.
	prefer uint64
	// from is the block the search for a free one starts at (0 or 1: the
	// top), wrapping around: claimPools spreads retries after a collision.
	from uint64
}

// space is the blocks of one subnet.
type space struct {
	subnet netip.Prefix
	size   uint64
	// max is the highest block index: blocks 1..max fill the top half.
	max uint64
}

func newSpace(network string, s netip.Prefix, size int) (space, error) {
	blockBits := bits.TrailingZeros(uint(size))
	hostBits := s.Addr().BitLen() - s.Bits()
	halfBits := hostBits - 1 - blockBits // log2 of the blocks in the top half
	if halfBits < 1 {
		return space{}, fmt.Errorf("docker network %q subnet %s is too small for load-balancer pools of %d addresses (taken from the top half of the subnet, the topmost block skipped): use a larger docker network", network, s, size)
	}
	// An IPv6 /64 has 2^59 blocks of 16: cap the count so that offsets
	// fit in 64 bits; it is only searched as far as the first free block.
	maxBlocks := uint64(1) << min(halfBits, 62-blockBits)
	return space{subnet: s, size: uint64(size), max: maxBlocks - 1}, nil
}

// block k from the top: its first address is last - (k+1)*size + 1.
func (sp space) block(k uint64) netip.Prefix {
	start := sub(lastAddr(sp.subnet), (k+1)*sp.size-1)
	return netip.PrefixFrom(start, sp.subnet.Addr().BitLen()-bits.TrailingZeros64(sp.size))
}

// familySubnets keeps the first IPv4 and the first IPv6 subnet of a docker
// network, in docker's order.
func familySubnets(network string, subnets []netip.Prefix) ([]netip.Prefix, error) {
	var chosen []netip.Prefix
	var have4, have6 bool
	for _, s := range subnets {
		s = s.Masked()
		switch {
		case s.Addr().Is4() && !have4:
			have4 = true
		case s.Addr().Is6() && !s.Addr().Is4In6() && !have6:
			have6 = true
		default:
			continue
		}
		chosen = append(chosen, s)
	}
	if len(chosen) == 0 {
		return nil, fmt.Errorf("docker network %q has no subnet to carve load-balancer addresses from", network)
	}
	return chosen, nil
}

func wantsFamily(ipFamily string, s netip.Prefix) bool {
	if s.Addr().Is4() {
		return ipFamily != model.IPv6
	}
	return ipFamily == model.IPv6 || ipFamily == model.Dual
}

// allocate gives each request one block of size addresses per IP family of
// its cluster that the docker network has, keeping the blocks it holds and
// avoiding every block taken (by other environments' clusters). It is
// deterministic: the same inputs give the same pools. Nothing is changed
// here: a full subnet is an error before anything is claimed.
func allocate(network string, subnets []netip.Prefix, size int, env string, reqs []request, taken []holder) ([][]netip.Prefix, error) {
	if size < 1 || size&(size-1) != 0 {
		return nil, fmt.Errorf("address pool size %d: want a power of two", size)
	}
	chosen, err := familySubnets(network, subnets)
	if err != nil {
		return nil, err
	}
	out := make([][]netip.Prefix, len(reqs))
	for _, s := range chosen {
		var wanted bool
		for _, r := range reqs {
			wanted = wanted || wantsFamily(r.ipFamily, s)
		}
		if !wanted {
			continue
		}
		sp, err := newSpace(network, s, size)
		if err != nil {
			return nil, err
		}
		var used []netip.Prefix
		for _, h := range taken {
			used = append(used, h.pools...)
		}
		got := make([]netip.Prefix, len(reqs))
		// Blocks held are kept first, so that a cluster that has none
		// cannot take the block of one that comes after it.
		for k, r := range reqs {
			if !wantsFamily(r.ipFamily, s) {
				continue
			}
			for _, p := range r.have {
				if s.Contains(p.Addr()) && s.Contains(lastAddr(p)) {
					got[k] = p
					used = append(used, p)
					break
				}
			}
		}
		for k, r := range reqs {
			if !wantsFamily(r.ipFamily, s) || got[k].IsValid() {
				continue
			}
			b, ok := sp.free(used, r.prefer, r.from)
			if !ok {
				return nil, fullError(network, sp, env, r.name, taken, used)
			}
			got[k] = b
			used = append(used, b)
		}
		for k := range reqs {
			if got[k].IsValid() {
				out[k] = append(out[k], got[k])
			}
		}
	}
	for k, r := range reqs {
		if len(out[k]) == 0 {
			return nil, fmt.Errorf("cluster %s (%s): docker network %q has no subnet of its IP family to carve load-balancer addresses from", r.name, r.ipFamily, network)
		}
	}
	return out, nil
}

// free returns block prefer if it is free, else the first free block from
// block from (the top, if 0) down, wrapping around. Used pools are blocks
// (of this or another pool size), so the search ends after a few blocks per
// used pool, even in an IPv6 /64.
func (sp space) free(used []netip.Prefix, prefer, from uint64) (netip.Prefix, bool) {
	isFree := func(b netip.Prefix) bool {
		for _, u := range used {
			if u.Overlaps(b) {
				return false
			}
		}
		return true
	}
	if prefer >= 1 && prefer <= sp.max && isFree(sp.block(prefer)) {
		return sp.block(prefer), true
	}
	if from < 1 {
		from = 1
	}
	from = 1 + (from-1)%sp.max
	for n := uint64(0); n < sp.max; n++ {
		k := 1 + (from-1+n)%sp.max
		if b := sp.block(k); isFree(b) {
			return b, true
		}
	}
	return netip.Prefix{}, false
}

// fullError names the network, how many blocks there are and who uses them.
func fullError(network string, sp space, env, clusterName string, taken []holder, used []netip.Prefix) error {
	byEnv := map[string]int{}
	for _, h := range taken {
		for _, p := range h.pools {
			if sp.subnet.Overlaps(p) {
				byEnv[h.env]++
			}
		}
	}
	var own int
	for _, p := range used {
		if sp.subnet.Overlaps(p) {
			own++
		}
	}
	for _, n := range byEnv {
		own -= n
	}
	envs := make([]string, 0, len(byEnv))
	for e := range byEnv {
		envs = append(envs, e)
	}
	sort.Strings(envs)
	var users []string
	for _, e := range envs {
		users = append(users, fmt.Sprintf("%d by environment %q", byEnv[e], e))
	}
	if own > 0 {
		users = append(users, fmt.Sprintf("%d by this environment (%q)", own, env))
	}
	return fmt.Errorf("docker network %q subnet %s has no free block of %d load-balancer addresses for cluster %s: its %d blocks (the top half of the subnet, the topmost block skipped) are used: %s; delete an environment (`meshctl down --env <name>`) or use a larger docker network",
		network, sp.subnet, sp.size, clusterName, sp.max, strings.Join(users, ", "))
}

// holders reads, from the records of every cluster on the machine, the
// pools held on network's subnets: recorded pools, and for a cluster of a
// multi-network environment that an older meshctl created (its record has
// no pools at all, not even empty ones) the block that meshctl carved for
// it, whether or not it connected the environment: assuming so is
// conservative, at worst a block stays unused. It also returns the kind
// clusters whose record cannot be read.
func holders(all []cluster.Listed, network string, subnets []netip.Prefix) (hs []holder, unreadable []string) {
	envs := map[string][]model.Record{}
	for _, e := range all {
		switch {
		case e.Error != "":
			unreadable = append(unreadable, fmt.Sprintf("%s (%s)", e.KindName, e.Error))
		case e.Record != nil:
			// existing clusters too: they hold nothing, but count for
			// positions as they did for older meshctl versions
			envs[e.Env()] = append(envs[e.Env()], *e.Record)
		}
	}
	chosen, _ := familySubnets(network, subnets)
	for env, recs := range envs {
		sort.Slice(recs, func(i, j int) bool { return recs[i].Cluster.Name < recs[j].Cluster.Name })
		multi := false
		for _, r := range recs {
			multi = multi || r.Cluster.Network != recs[0].Cluster.Network
		}
		for k, r := range recs {
			if r.Cluster.Existing {
				continue
			}
			h := holder{env: env, cluster: r.Cluster.Name}
			switch {
			case r.Pools != nil && r.Pools.DockerNetwork == network:
				for _, c := range r.Pools.CIDRs {
					if p, err := netip.ParsePrefix(c); err == nil {
						h.pools = append(h.pools, p.Masked())
					}
				}
			case r.Pools == nil && multi:
				h.inferred = true
				for _, s := range chosen {
					if sp, err := newSpace(network, s, DefaultPoolSize); err == nil && uint64(k+1) <= sp.max {
						h.pools = append(h.pools, sp.block(uint64(k+1)))
					}
				}
			}
			if len(h.pools) > 0 {
				hs = append(hs, h)
			}
		}
	}
	sort.Slice(hs, func(i, j int) bool {
		if hs[i].env != hs[j].env {
			return hs[i].env < hs[j].env
		}
		return hs[i].cluster < hs[j].cluster
	})
	return hs, unreadable
}

// lastAddr is the highest address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := range b {
		host := p.Bits() - 8*i // bits of this byte that belong to the network
		switch {
		case host <= 0:
			b[i] = 0xff
		case host < 8:
			b[i] |= 0xff >> host
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// sub returns a - d. d is at most half the host part of the subnets it is
// used on (newSpace checks that), so it never borrows from the network.
func sub(a netip.Addr, d uint64) netip.Addr {
	b := a.AsSlice()
	borrow := d
	for i := len(b) - 1; i >= 0 && borrow > 0; i-- {
		v := uint64(b[i])
		s := borrow & 0xff
		borrow >>= 8
		if v < s {
			v += 256
			borrow++
		}
		b[i] = byte(v - s)
	}
	r, _ := netip.AddrFromSlice(b)
	return r
}
