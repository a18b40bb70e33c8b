package hbone

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

const maxAuthLength = 64 // "[" + 45-char IPv6 + "]:" + 5-digit port, with slack

var errNotIPPort = errors.New("authority is not ip:port")

// parseAuthority parses a CONNECT :authority, which HBONE requires to be a
// literal IP and port. Host names, zones, port 0 and non-canonical forms are
// refused because the server compares the IP with the connection's own
// destination and a second spelling of the same address would dodge that check.
func parseAuthority(s string) (netip.AddrPort, error) {
	if len(s) == 0 || len(s) > maxAuthLength {
		return netip.AddrPort{}, fmt.Errorf("authority %q: %w", s, errNotIPPort)
	}
	host, portStr, ok := cutPort(s)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("authority %q: %w", s, errNotIPPort)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || addr.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("authority %q: %w", s, errNotIPPort)
	}
	if addr.Is4In6() {
		return netip.AddrPort{}, fmt.Errorf("authority %q: IPv4-mapped address: %w", s, errNotIPPort)
	}
	// strconv accepts "+80" and leading zeros; a port is plain digits here.
	if len(portStr) == 0 || len(portStr) > 5 || strings.TrimLeft(portStr, "0123456789") != "" ||
		(len(portStr) > 1 && portStr[0] == '0') {
		return netip.AddrPort{}, fmt.Errorf("authority %q: bad port: %w", s, errNotIPPort)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return netip.AddrPort{}, fmt.Errorf("authority %q: bad port: %w", s, errNotIPPort)
	}
	ap := netip.AddrPortFrom(addr, uint16(port))
	if ap.String() != s {
		return netip.AddrPort{}, fmt.Errorf("authority %q: not canonical (%s): %w", s, ap, errNotIPPort)
	}
	return ap, nil
}

// cutPort splits "host:port" or "[v6]:port" without net.SplitHostPort's
// leniency about missing brackets.
func cutPort(s string) (host, port string, ok bool) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]:")
		if end < 0 {
			return "", "", false
		}
		host, port = s[1:end], s[end+2:]
		return host, port, strings.Contains(host, ":")
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 || strings.Contains(s[:i], ":") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// forwardedFor formats the RFC 7239 Forwarded header ztunnel sends.
func forwardedFor(src netip.Addr) string {
	if src.Is6() {
		return `for="[` + src.String() + `]"`
	}
	return `for="` + src.String() + `"`
}

// maxHostAuthority bounds a host-name authority: a DNS name and a port.
const maxHostAuthority = 253 + 6

// hostAuthority is a CONNECT :authority naming a service by host name, as
// ztunnel sends through a network gateway (double HBONE).
type hostAuthority struct {
	host string
	port uint16
}

// parseHostAuthority parses "host:port" where host is a DNS name: lower
// case letters, digits and hyphens in dot-separated labels of 1 to 63
// characters, not all digits (an IP is never taken for a name).
func parseHostAuthority(s string) (hostAuthority, error) {
	i := strings.LastIndexByte(s, ':')
	if len(s) > maxHostAuthority || i <= 0 {
		return hostAuthority{}, fmt.Errorf("authority %q: %w", s, errNotHostPort)
	}
	host, portStr := s[:i], s[i+1:]
	if len(portStr) == 0 || len(portStr) > 5 || strings.TrimLeft(portStr, "0123456789") != "" ||
		(len(portStr) > 1 && portStr[0] == '0') {
		return hostAuthority{}, fmt.Errorf("authority %q: bad port: %w", s, errNotHostPort)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return hostAuthority{}, fmt.Errorf("authority %q: bad port: %w", s, errNotHostPort)
	}
	letters := false
	for _, label := range strings.Split(host, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return hostAuthority{}, fmt.Errorf("authority %q: bad host name: %w", s, errNotHostPort)
		}
		for _, c := range []byte(label) {
			switch {
			case c >= 'a' && c <= 'z', c == '-':
				letters = true
			case c >= '0' && c <= '9':
			default:
				return hostAuthority{}, fmt.Errorf("authority %q: bad host name: %w", s, errNotHostPort)
			}
		}
	}
	if !letters {
		return hostAuthority{}, fmt.Errorf("authority %q: bad host name: %w", s, errNotHostPort)
	}
	return hostAuthority{host: host, port: uint16(port)}, nil
}

var errNotHostPort = errors.New("authority is not host:port")
