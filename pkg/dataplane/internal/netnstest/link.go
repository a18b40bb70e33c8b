package netnstest

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
)

func linkUp(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("setting %s up: %w", name, err)
	}
	return nil
}

// Veth joins a and b with a veth pair named ifA/ifB, addressed with the given
// prefixes (e.g. 10.99.0.1/24), both ends up.
func Veth(a *os.File, ifA string, addrA netip.Prefix, b *os.File, ifB string, addrB netip.Prefix) error {
	err := Do(a, func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifA}, PeerName: ifB, PeerNamespace: netlink.NsFd(int(b.Fd()))}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("adding veth %s/%s: %w", ifA, ifB, err)
		}
		return AddrAdd(ifA, addrA)
	})
	if err != nil {
		return err
	}
	return Do(b, func() error { return AddrAdd(ifB, addrB) })
}

// AddrAdd adds addr to the link in the calling thread's netns and sets it up.
func AddrAdd(link string, addr netip.Prefix) error {
	l, err := netlink.LinkByName(link)
	if err != nil {
		return fmt.Errorf("finding %s: %w", link, err)
	}
	a, err := netlink.ParseAddr(addr.String())
	if err != nil {
		return fmt.Errorf("parsing %s: %w", addr, err)
	}
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("adding %s to %s: %w", addr, link, err)
	}
	return linkUp(link)
}
