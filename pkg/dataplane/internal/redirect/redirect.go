package redirect

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/nftutil"
)

// The in-pod port table, as upstream's ztunnel listens on it.
const (
	OutboundPort = 15001 // outbound capture
	InboundPort  = 15006 // inbound plaintext
	HBONEPort    = 15008 // inbound HBONE, never redirected
	BypassMark   = 0x539 // SO_MARK on the proxy's own sockets
	BypassMask   = 0xfff
	// Replies to the proxy's spoofed-source connections to the pod's app
	// carry this connection mark, and the policy route sends packets with it
	// back to the proxy over lo (upstream's values: mark 0x111, table 100).
	ReturnMark         = 0x111
	ReturnTable        = 100
	ReturnRulePriority = 32764
	DefaultTable       = "meshctl-inpod"
	kubeletProbeV4     = "169.254.7.127"
	kubeletProbeV6     = "fd16:9254:7127:1337:ffff:ffff:ffff:ffff"
)

// DefaultProbeSource and DefaultProbeSourceV6 are the addresses upstream's
// node agent SNATs kubelet probes to (IPv4, IPv6); traffic from them reaches
// the pod's ports directly.
var (
	DefaultProbeSource   = netip.MustParseAddr(kubeletProbeV4)
	DefaultProbeSourceV6 = netip.MustParseAddr(kubeletProbeV6)
)

// Redirector applies and removes the in-pod rules.
type Redirector struct {
	table        string
	probeSources []netip.Addr
}

// New returns a Redirector with upstream-compatible defaults.
func New() *Redirector {
	return &Redirector{table: DefaultTable, probeSources: []netip.Addr{DefaultProbeSource, DefaultProbeSourceV6}}
}

// Apply installs (or re-installs) the rules in netns, atomically.
func (r *Redirector) Apply(netns *os.File) error {
	c, err := nftutil.Open(netns)
	if err != nil {
		return err
	}
	// Add (a no-op when present) then flush in the same batch: the old
	// rules are replaced by the new ones in one transaction.
	t := c.AddTable(nftutil.Table(r.table))
	c.FlushTable(t)
	pre := c.AddChain(&nftables.Chain{
		Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest,
	})
	out := c.AddChain(&nftables.Chain{
		Name: "output", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest,
	})
	for _, e := range r.preroutingRules() {
		c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: e})
	}
	for _, e := range outputRules() {
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: e})
	}
	// Source preservation: the proxy delivers inbound connections from the
	// original client's address (IP_TRANSPARENT). Its SYN loops over lo with
	// the bypass mark; the connection is marked here, and the app's replies,
	// addressed to a remote IP, are re-marked on output so the policy route
	// below delivers them locally, to the proxy, instead of out of eth0.
	markConn := c.AddChain(&nftables.Chain{
		Name: "mangle_prerouting", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: markConn, Exprs: markProxyConnection()})
	restore := c.AddChain(&nftables.Chain{
		Name: "mangle_output", Table: t, Type: nftables.ChainTypeRoute,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityMangle,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: restore, Exprs: restoreReturnMark()})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing in-pod redirection: %w", err)
	}
	if err := applyReturnRoutes(netns); err != nil {
		return fmt.Errorf("installing in-pod redirection: %w", err)
	}
	return nil
}

// Remove deletes the rules from netns; absent rules are not an error, so a
// retried pod delete succeeds.
func (r *Redirector) Remove(netns *os.File) error {
	if err := nftutil.DeleteTable(netns, r.table); err != nil {
		return fmt.Errorf("removing in-pod redirection: %w", err)
	}
	if err := removeReturnRoutes(netns); err != nil {
		return fmt.Errorf("removing in-pod redirection: %w", err)
	}
	return nil
}

// Installed reports whether netns has the rules table.
func (r *Redirector) Installed(netns *os.File) (bool, error) {
	c, err := nftutil.Open(netns)
	if err != nil {
		return false, err
	}
	return nftutil.TableExists(c, r.table)
}

// preroutingRules: inbound TCP goes to 15006 unless it is the proxy's own
// traffic, a probe, loopback, or HBONE (which the proxy terminates itself).
func (r *Redirector) preroutingRules() [][]expr.Any {
	rules := [][]expr.Any{ret(markIsBypass())}
	for _, a := range r.probeSources {
		rules = append(rules, ret(addrIs(a, true)))
	}
	return append(rules,
		ret(addrIs(netip.MustParseAddr("127.0.0.1"), false)),
		ret(addrIs(netip.IPv6Loopback(), false)),
		ret(tcpDport(HBONEPort)),
		redirectTCP(InboundPort),
	)
}

// outputRules: the pod's outbound TCP goes to 15001 unless the proxy marked
// the socket, or it stays inside the pod (loopback, or the pod's own IP,
// which the kernel routes over lo).
func outputRules() [][]expr.Any {
	return [][]expr.Any{
		ret(markIsBypass()),
		ret(oifIs("lo")),
		redirectTCP(OutboundPort),
	}
}

// markProxyConnection: a packet still carrying the proxy's bypass mark in
// prerouting came from the proxy over lo; its connection gets ReturnMark
// (in the 0xfff bits, keeping any others).
func markProxyConnection() []expr.Any {
	return append(markIsBypass(),
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^uint32(BypassMask)), Xor: binaryutil.NativeEndian.PutUint32(ReturnMark)},
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1, SourceRegister: true},
	)
}

// restoreReturnMark copies the connection mark onto the packets of such a
// connection as the pod sends them; the route chain re-routes a packet whose
// mark changed, which is what makes the policy route apply.
func restoreReturnMark() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(BypassMask), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(ReturnMark)},
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true},
	}
}

func ret(match []expr.Any) []expr.Any {
	return append(match, &expr.Verdict{Kind: expr.VerdictReturn})
}

func markIsBypass() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(BypassMask), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(BypassMark)},
	}
}

// addrIs matches the source (src) or destination address of either family.
func addrIs(a netip.Addr, src bool) []expr.Any {
	proto, off := byte(unix.NFPROTO_IPV4), uint32(16)
	if src {
		off = 12
	}
	if a.Is6() && !a.Is4In6() {
		proto, off = unix.NFPROTO_IPV6, 24
		if src {
			off = 8
		}
	}
	b := a.Unmap().AsSlice()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(b))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

func isTCP() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
}

func tcpDport(port uint16) []expr.Any {
	return append(isTCP(),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	)
}

func oifIs(name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

func redirectTCP(port uint16) []expr.Any {
	return append(isTCP(),
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	)
}
