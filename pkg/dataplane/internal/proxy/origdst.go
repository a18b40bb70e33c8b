package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (IPv4) and IP6T_SO_ORIGINAL_DST (IPv6);
// both are 80, at SOL_IP and SOL_IPV6 respectively.
const soOriginalDst = 80

// originalDst returns where a REDIRECTed connection was really going, from
// conntrack via getsockopt on the accepted socket.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, errors.New("original destination: not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	local, _ := c.LocalAddr().(*net.TCPAddr)
	v6 := local != nil && local.IP.To4() == nil
	var out netip.AddrPort
	var serr error
	if err := rc.Control(func(fd uintptr) { out, serr = getOriginalDst(int(fd), v6) }); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", serr)
	}
	return out, nil
}

func getOriginalDst(fd int, v6 bool) (netip.AddrPort, error) {
	if v6 {
		var sa unix.RawSockaddrInet6
		size := uint32(unsafe.Sizeof(sa))
		if err := getsockopt(fd, unix.SOL_IPV6, soOriginalDst, unsafe.Pointer(&sa), &size); err != nil {
			return netip.AddrPort{}, err
		}
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port), nil
	}
	var sa unix.RawSockaddrInet4
	size := uint32(unsafe.Sizeof(sa))
	if err := getsockopt(fd, unix.SOL_IP, soOriginalDst, unsafe.Pointer(&sa), &size); err != nil {
		return netip.AddrPort{}, err
	}
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), nil
}

func getsockopt(fd, level, opt int, val unsafe.Pointer, size *uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(val), uintptr(unsafe.Pointer(size)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
