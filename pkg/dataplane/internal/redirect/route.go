package redirect

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The policy route of source preservation, for both families:
//
//	ip rule add fwmark 0x111/0xfff pref 32764 lookup 100
//	ip route add local 0.0.0.0/0 dev lo table 100   (and ::/0)
//
// A reply the pod sends to a remote client's address, re-marked by the
// mangle_output chain, is thereby delivered locally: to the proxy's
// transparent socket that owns that address for this connection.

func returnRule(family int) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = family
	r.Mark = ReturnMark
	mask := uint32(BypassMask)
	r.Mask = &mask
	r.Table = ReturnTable
	r.Priority = ReturnRulePriority
	return r
}

func returnRoute(family int, lo int) *netlink.Route {
	dst := &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	if family == unix.AF_INET6 {
		dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	return &netlink.Route{Family: family, Dst: dst, LinkIndex: lo, Table: ReturnTable,
		Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST}
}

func netlinkIn(ns *os.File) (*netlink.Handle, error) {
	h, err := netlink.NewHandleAt(netns.NsHandle(int(ns.Fd())))
	if err != nil {
		return nil, fmt.Errorf("netlink in pod netns: %w", err)
	}
	return h, nil
}

// hasRule reports whether family already has the return rule (RuleAdd does
// not refuse duplicates, so re-applying must look first).
func hasRule(h *netlink.Handle, family int) (bool, error) {
	rules, err := h.RuleList(family)
	if err != nil {
		return false, err
	}
	for _, r := range rules {
		if r.Table == ReturnTable && r.Mark == ReturnMark && r.Priority == ReturnRulePriority &&
			r.Mask != nil && *r.Mask == BypassMask {
			return true, nil
		}
	}
	return false, nil
}

// ipv6Off reports the errors of a pod whose IPv6 is disabled (no IPv6 in the
// kernel, or disable_ipv6 on lo: EACCES): it has no IPv6 traffic to route
// back, so there is nothing to install.
func ipv6Off(err error) bool {
	return errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EACCES)
}

func applyReturnRoutes(ns *os.File) error {
	h, err := netlinkIn(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("return route: lo: %w", err)
	}
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		if err := h.RouteReplace(returnRoute(family, lo.Attrs().Index)); err != nil {
			if family == unix.AF_INET6 && ipv6Off(err) {
				continue
			}
			return fmt.Errorf("return route (family %d): %w", family, err)
		}
		ok, err := hasRule(h, family)
		if err == nil && !ok {
			err = h.RuleAdd(returnRule(family))
		}
		if err != nil {
			return fmt.Errorf("return rule (family %d): %w", family, err)
		}
	}
	return nil
}

// removeReturnRoutes deletes what applyReturnRoutes added; what is already
// gone is not an error, so a retried removal succeeds.
func removeReturnRoutes(ns *os.File) error {
	h, err := netlinkIn(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("return route: lo: %w", err)
	}
	gone := func(err error) bool {
		return err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) || ipv6Off(err)
	}
	var errs []error
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		for {
			ok, err := hasRule(h, family)
			if err != nil || !ok {
				if !gone(err) {
					errs = append(errs, fmt.Errorf("return rule (family %d): %w", family, err))
				}
				break
			}
			if err := h.RuleDel(returnRule(family)); err != nil {
				if !gone(err) {
					errs = append(errs, fmt.Errorf("return rule (family %d): %w", family, err))
				}
				break
			}
		}
		if err := h.RouteDel(returnRoute(family, lo.Attrs().Index)); !gone(err) {
			errs = append(errs, fmt.Errorf("return route (family %d): %w", family, err))
		}
	}
	return errors.Join(errs...)
}
