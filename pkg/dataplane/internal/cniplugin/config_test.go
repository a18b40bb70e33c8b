package cniplugin

import (
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// FuzzParseConfig: whatever arrives on stdin, the plugin answers with a CNI
// error (never a panic), and an accepted config yields a printable result.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(conf("1.0.0", "/run/a.sock", "", true)))
	f.Add([]byte(conf("0.3.1", "", "/etc/cni/net.d/kc", true)))
	f.Add([]byte(`{"cniVersion":"0.4.0","prevResult":{"ips":[{"version":"6","address":"fd00::1/64"}]}}`))
	f.Add([]byte(`{"prevResult":null,"exclude_namespaces":null}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","prevResult":{"cniVersion":"0.1.0"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, stdin []byte) {
		c, err := parseConfig(stdin)
		if err != nil {
			var cniErr *types.Error
			if !errors.As(err, &cniErr) {
				t.Fatalf("not a CNI error: %T %v", err, err)
			}
			return
		}
		if c.AgentSocket == "" || c.ExcludeNamespaces == nil {
			t.Fatalf("defaults not applied: %+v", c)
		}
		if out, err := c.output(); err == nil {
			if _, err := podIPs(out); err != nil {
				var cniErr *types.Error
				if !errors.As(err, &cniErr) {
					t.Fatalf("podIPs: not a CNI error: %v", err)
				}
			}
		}
	})
}
