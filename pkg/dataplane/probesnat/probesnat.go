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
	"github.com/meshctl/meshctl/pkg/dataplane/redirect"
)

// DefaultTable names the node-side table.
const DefaultTable = "meshctl-host"

const setV4 = "meshed-pods-v4"

// SNAT keeps the node's probe SNAT rule and its set of meshed pod IPs.
type SNAT struct {
	table  string
	source netip.Addr
	netns  *os.File
}

// Option configures a SNAT.
type Option func(*SNAT)

// WithTable names the nftables table (inet family).
func WithTable(name string) Option { return func(s *SNAT) { s.table = name } }

// WithNetns works in netns instead of the caller's (tests, or an agent
// that is not itself in the host netns).
func WithNetns(f *os.File) Option { return func(s *SNAT) { s.netns = f } }

// New returns a SNAT rewriting probes to redirect.DefaultProbeSource, the
// address the in-pod rules exempt.
func New(opts ...Option) *SNAT {
	s := &SNAT{table: DefaultTable, source: redirect.DefaultProbeSource}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *SNAT) setRef() *nftables.Set {
	return &nftables.Set{Table: nftutil.Table(s.table), Name: setV4, KeyType: nftables.TypeIPAddr}
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
	set := s.setRef()
	set.Table = t
	if err := c.AddSet(set, elements(pods)); err != nil {
		return fmt.Errorf("adding meshed pod set: %w", err)
	}
	ch := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		// Source is an address of this node: a host process, i.e. the
		// kubelet, not a pod whose traffic the node forwards.
		&expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		&expr.Immediate{Register: 1, Data: s.source.AsSlice()},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing probe SNAT: %w", err)
	}
	return nil
}

// AddPod adds a meshed pod's IPv4 addresses to the set.
func (s *SNAT) AddPod(ips ...netip.Addr) error {
	els := elements(ips)
	if len(els) == 0 {
		return nil
	}
	c, err := nftutil.Open(s.netns)
	if err != nil {
		return err
	}
	if err := c.SetAddElements(s.setRef(), els); err != nil {
		return fmt.Errorf("adding pod to probe SNAT: %w", err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("adding pod to probe SNAT: %w", err)
	}
	return nil
}

// RemovePod takes a pod's addresses out of the set; absent ones are fine.
func (s *SNAT) RemovePod(ips ...netip.Addr) error {
	c, err := nftutil.Open(s.netns)
	if err != nil {
		return err
	}
	present, err := c.GetSetElements(s.setRef())
	if err != nil {
		return fmt.Errorf("listing probe SNAT set: %w", err)
	}
	want := map[netip.Addr]bool{}
	for _, ip := range ips {
		want[ip.Unmap()] = true
	}
	var del []nftables.SetElement
	for _, e := range present {
		if a, ok := netip.AddrFromSlice(e.Key); ok && want[a] {
			del = append(del, e)
		}
	}
	if len(del) == 0 {
		return nil
	}
	if err := c.SetDeleteElements(s.setRef(), del); err != nil {
		return fmt.Errorf("removing pod from probe SNAT: %w", err)
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

// elements keeps the IPv4 addresses: the SNAT source is IPv4, as upstream's
// default is.
func elements(ips []netip.Addr) []nftables.SetElement {
	var out []nftables.SetElement
	for _, ip := range ips {
		if ip = ip.Unmap(); ip.Is4() {
			out = append(out, nftables.SetElement{Key: ip.AsSlice()})
		}
	}
	return out
}
