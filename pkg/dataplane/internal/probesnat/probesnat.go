package probesnat

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/nftutil"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/redirect"
)

// DefaultTable names the node-side table.
const DefaultTable = "meshctl-host"

const (
	setV4 = "meshed-pods-v4"
	setV6 = "meshed-pods-v6"
)

// SNAT keeps the node's probe SNAT rules (IPv4 and IPv6) and their sets of
// meshed pod IPs.
type SNAT struct {
	table    string
	source   netip.Addr
	sourceV6 netip.Addr
	netns    *os.File
}

// Option configures a SNAT.
type Option func(*SNAT)

// WithNetns works in netns instead of the caller's (tests, or an agent
// that is not itself in the host netns).
func WithNetns(f *os.File) Option { return func(s *SNAT) { s.netns = f } }

// New returns a SNAT rewriting probes to redirect.DefaultProbeSource (IPv4)
// and redirect.DefaultProbeSourceV6, the addresses the in-pod rules exempt.
func New(opts ...Option) *SNAT {
	s := &SNAT{table: DefaultTable, source: redirect.DefaultProbeSource, sourceV6: redirect.DefaultProbeSourceV6}
	for _, o := range opts {
		o(s)
	}
	return s
}

// family is what differs between the IPv4 and IPv6 rule.
type family struct {
	set    string
	key    nftables.SetDatatype
	proto  byte   // NFPROTO_IPV4 / NFPROTO_IPV6
	dstOff uint32 // destination address in the network header
	len    uint32
}

var (
	v4 = family{set: setV4, key: nftables.TypeIPAddr, proto: unix.NFPROTO_IPV4, dstOff: 16, len: 4}
	v6 = family{set: setV6, key: nftables.TypeIP6Addr, proto: unix.NFPROTO_IPV6, dstOff: 24, len: 16}
)

func (s *SNAT) setRef(f family) *nftables.Set {
	return &nftables.Set{Table: nftutil.Table(s.table), Name: f.set, KeyType: f.key}
}

func (s *SNAT) sourceOf(f family) netip.Addr {
	if f.proto == unix.NFPROTO_IPV6 {
		return s.sourceV6
	}
	return s.source
}

// Setup (re)creates the table with exactly pods as the meshed set, in one
// batch, so a restarted agent never leaves a moment without the rule.
func (s *SNAT) Setup(pods ...netip.Addr) error {
	c, err := nftutil.Open(s.netns)
	if err != nil {
		return err
	}
	exists, err := nftutil.TableExists(c, s.table)
	if err != nil {
		return err
	}
	if exists {
		c.DelTable(nftutil.Table(s.table))
	}
	t := c.AddTable(nftutil.Table(s.table))
	ch := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	for _, f := range []family{v4, v6} {
		set := s.setRef(f)
		set.Table = t
		if err := c.AddSet(set, elements(pods, f)); err != nil {
			return fmt.Errorf("adding meshed pod set %s: %w", f.set, err)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f.proto}},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			// Source is an address of this node: a host process, i.e. the
			// kubelet, not a pod whose traffic the node forwards.
			&expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: f.dstOff, Len: f.len},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
			&expr.Immediate{Register: 1, Data: s.sourceOf(f).AsSlice()},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: uint32(f.proto), RegAddrMin: 1},
		}})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing probe SNAT: %w", err)
	}
	return nil
}

// AddPod adds a meshed pod's addresses (IPv4 and IPv6) to the sets.
func (s *SNAT) AddPod(ips ...netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	c, err := nftutil.Open(s.netns)
	if err != nil {
		return err
	}
	for _, f := range []family{v4, v6} {
		if els := elements(ips, f); len(els) > 0 {
			if err := c.SetAddElements(s.setRef(f), els); err != nil {
				return fmt.Errorf("adding pod to probe SNAT: %w", err)
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("adding pod to probe SNAT: %w", err)
	}
	return nil
}

// RemovePod takes a pod's addresses out of the sets; absent ones are fine.
func (s *SNAT) RemovePod(ips ...netip.Addr) error {
	c, err := nftutil.Open(s.netns)
	if err != nil {
		return err
	}
	want := map[netip.Addr]bool{}
	for _, ip := range ips {
		want[ip.Unmap()] = true
	}
	changed := false
	for _, f := range []family{v4, v6} {
		present, err := c.GetSetElements(s.setRef(f))
		if err != nil {
			return fmt.Errorf("listing probe SNAT set %s: %w", f.set, err)
		}
		var del []nftables.SetElement
		for _, e := range present {
			if a, ok := netip.AddrFromSlice(e.Key); ok && want[a.Unmap()] {
				del = append(del, e)
			}
		}
		if len(del) == 0 {
			continue
		}
		if err := c.SetDeleteElements(s.setRef(f), del); err != nil {
			return fmt.Errorf("removing pod from probe SNAT: %w", err)
		}
		changed = true
	}
	if !changed {
		return nil
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("removing pod from probe SNAT: %w", err)
	}
	return nil
}

// Teardown removes the table; the agent calls it only when uninstalled.
func (s *SNAT) Teardown() error {
	if err := nftutil.DeleteTable(s.netns, s.table); err != nil {
		return fmt.Errorf("removing probe SNAT: %w", err)
	}
	return nil
}

// elements keeps the addresses of family f.
func elements(ips []netip.Addr, f family) []nftables.SetElement {
	var out []nftables.SetElement
	for _, ip := range ips {
		if ip = ip.Unmap(); (f.proto == unix.NFPROTO_IPV6) == ip.Is6() {
			out = append(out, nftables.SetElement{Key: ip.AsSlice()})
		}
	}
	return out
}
