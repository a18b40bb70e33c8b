package redirect

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// OriginalDestination returns where a connection redirected to 15001 or
// 15006 was going before REDIRECT rewrote it (SO_ORIGINAL_DST).
func OriginalDestination(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	local, _ := c.LocalAddr().(*net.TCPAddr)
	v6 := local != nil && local.IP.To4() == nil
	var (
		ap   netip.AddrPort
		serr error
	)
	if err := rc.Control(func(fd uintptr) { ap, serr = originalDst(int(fd), v6) }); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", serr)
	}
	return ap, nil
}

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h,
// which x/sys does not define.
const ip6tSOOriginalDst = 80

// originalDst reads the sockaddr the kernel returns for SO_ORIGINAL_DST.
// x/sys has no getter of that shape; the two used here return structs whose
// leading bytes have the sockaddr_in / sockaddr_in6 layout, which is the
// usual way to read it without unsafe.
func originalDst(fd int, v6 bool) (netip.AddrPort, error) {
	if v6 {
		info, err := unix.GetsockoptIPv6MTUInfo(fd, unix.SOL_IPV6, ip6tSOOriginalDst)
		if err != nil {
			return netip.AddrPort{}, err
		}
		// Port holds the network-order bytes as the kernel wrote them.
		port := binary.BigEndian.Uint16([]byte{byte(info.Addr.Port), byte(info.Addr.Port >> 8)})
		return netip.AddrPortFrom(netip.AddrFrom16(info.Addr.Addr), port), nil
	}
	mreq, err := unix.GetsockoptIPv6Mreq(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST)
	if err != nil {
		return netip.AddrPort{}, err
	}
	// sockaddr_in: family (2 bytes), port (2, network order), addr (4).
	m := mreq.Multiaddr
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(m[4:8])), binary.BigEndian.Uint16(m[2:4])), nil
}
