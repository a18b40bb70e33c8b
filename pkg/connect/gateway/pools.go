package gateway

import (
	"fmt"
	"math/bits"
	"net/netip"
)

// DefaultPoolSize is how many addresses each cluster's pool gets, per IP
// family: one for the east-west gateway and room for a few more
// LoadBalancer services a developer may add.
const DefaultPoolSize = 16

// carvePools gives each of n clusters one block of size addresses from every
// IP family of the docker network: the first IPv4 and the first IPv6 subnet.
// Blocks are aligned CIDRs counted down from the top of the subnet, because
// docker hands out container addresses from the bottom; the topmost block is
// skipped (it holds the IPv4 broadcast address). Cluster i always gets block
// i+1, so pools are deterministic and disjoint. The pools may use at most the
// top half of a subnet: the bottom half stays for nodes and other containers.
func carvePools(network string, subnets []netip.Prefix, n, size int) ([][]netip.Prefix, error) {
	if size < 1 || size&(size-1) != 0 {
		return nil, fmt.Errorf("address pool size %d: want a power of two", size)
	}
	if n < 1 {
		return nil, fmt.Errorf("address pools for %d clusters: want at least one", n)
	}
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
	blockBits := bits.TrailingZeros(uint(size))
	out := make([][]netip.Prefix, n)
	for _, s := range chosen {
		hostBits := s.Addr().BitLen() - s.Bits()
		// (n+1) blocks (the skipped top one too) must fit in half the subnet.
		if hostBits < blockBits+1 || (hostBits-1 < 62 && uint64(n+1)*uint64(size) > uint64(1)<<(hostBits-1)) {
			return nil, fmt.Errorf("docker network %q subnet %s is too small for %d clusters' load-balancer pools of %d addresses (from the top half of the subnet): use a larger network or fewer clusters", network, s, n, size)
		}
		last := lastAddr(s)
		for i := range n {
			// block i+1 from the top: its first address is last - (i+2)*size + 1
			start := sub(last, uint64(i+2)*uint64(size)-1)
			out[i] = append(out[i], netip.PrefixFrom(start, s.Addr().BitLen()-blockBits))
		}
	}
	return out, nil
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

// sub returns a - d. d is far smaller than the host part of the subnets it
// is used on (carvePools checks that), so it never borrows from the network.
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
