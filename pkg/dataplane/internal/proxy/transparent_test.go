package proxy

import (
	"net/netip"
	"os"
	"testing"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/podnet"
)

// TestShouldPreserve: which inbound connections are delivered from the
// client's address. The network side is TestIntegrationTwoNodesCapturedOverHBONE.
func TestShouldPreserve(t *testing.T) {
	t.Parallel()
	f, err := os.Open(os.DevNull) // stands for a pod netns file; never entered here
	if err != nil {
		t.Fatal(err)
	}
	pod := &workload{ns: podnet.New(f), addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}
	defer pod.ns.Close()
	inProcess := &workload{}
	on, off := &Proxy{opts: defaults()}, &Proxy{opts: defaults()}
	off.opts.preserveSource = false
	dst4, dst6 := netip.MustParseAddrPort("10.0.0.2:80"), netip.MustParseAddrPort("[fd00::2]:80")
	for _, c := range []struct {
		name string
		p    *Proxy
		w    *workload
		src  string
		dst  netip.AddrPort
		want bool
	}{
		{"remote v4 client", on, pod, "10.1.0.5", dst4, true},
		{"remote v6 client", on, pod, "fd00:1::5", dst6, true},
		{"switched off", off, pod, "10.1.0.5", dst4, false},
		{"in-process pod has no return route", on, inProcess, "10.1.0.5", dst4, false},
		{"loopback", on, pod, "127.0.0.1", dst4, false},
		{"the pod itself", on, pod, "10.0.0.2", dst4, false},
		{"family mismatch", on, pod, "fd00:1::5", dst4, false},
		{"no source", on, pod, "", dst4, false},
	} {
		var src netip.Addr
		if c.src != "" {
			src = netip.MustParseAddr(c.src)
		}
		if got := c.p.shouldPreserve(c.w, src, c.dst); got != c.want {
			t.Errorf("%s: shouldPreserve = %v, want %v", c.name, got, c.want)
		}
	}
}
