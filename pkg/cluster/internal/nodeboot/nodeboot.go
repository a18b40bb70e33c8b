// Package nodeboot is what meshctl installs on a kind node for the node's
// later starts: a systemd unit that runs boot.sh before the kubelet (see
// the script for what it does and why). A Docker restart, a stopped node
// that `up` starts again, or a node that comes back on its own all go
// through it; the first start, at creation, gets the same rules applied by
// the install itself.
package nodeboot

import (
	_ "embed"
	"fmt"
	"net/netip"
	"path"
	"strings"
)

//go:embed boot.sh
var script string

// Where the files go on a node (beside meshctl's route reconciler).
const (
	ScriptPath = "/kind/meshctl/boot.sh"
	UnitName   = "meshctl-boot.service"
	unitPath   = "/etc/systemd/system/" + UnitName
	// Enabled by its link, as `systemctl enable` makes it: enable would
	// need a daemon-reload (≈ 0.2 s of the node's CPU) for a unit that
	// only matters at the next start, which reads the unit files anew.
	wantsLink = "/etc/systemd/system/multi-user.target.wants/" + UnitName
)

// Pairs pairs each pod subnet with the service subnet of its family, as
// boot.sh rules takes them ("POD=SVC"). A family without both has none.
func Pairs(podSubnets, serviceSubnets []string) ([]string, error) {
	var out []string
	for _, pod := range podSubnets {
		pp, err := netip.ParsePrefix(pod)
		if err != nil {
			return nil, fmt.Errorf("pod subnet %q: %w", pod, err)
		}
		for _, svc := range serviceSubnets {
			sp, err := netip.ParsePrefix(svc)
			if err != nil {
				return nil, fmt.Errorf("service subnet %q: %w", svc, err)
			}
			if pp.Addr().Is4() == sp.Addr().Is4() {
				out = append(out, pp.Masked().String()+"="+sp.Masked().String())
			}
		}
	}
	return out, nil
}

// Unit is the systemd unit for pairs. The rules are an ExecStartPre, which
// systemd finishes before it counts the unit started and so before the
// kubelet (ordered after it) starts a pod; the lease release waits for the
// API server and runs beside the kubelet. A failure of either does not
// stop the node from starting: Before= orders, it does not require.
func Unit(pairs []string) string {
	return `[Unit]
Description=meshctl: a restarted node's pods refused unrewritten Service addresses; leader leases of its previous start released
Before=kubelet.service

[Service]
Type=simple
ExecStartPre=-/bin/sh ` + ScriptPath + ` rules ` + strings.Join(pairs, " ") + `
ExecStart=/bin/sh ` + ScriptPath + ` leases

[Install]
WantedBy=multi-user.target
`
}

// InstallScript is the shell script (run with `sh -s` on the node) that
// writes boot.sh and its unit, enables the unit for the node's next starts,
// and applies the rules for this one. It does not release leases: at
// creation the control plane's leases are this start's own.
func InstallScript(pairs []string) []byte {
	var b strings.Builder
	b.WriteString("set -e\nmkdir -p " + path.Dir(ScriptPath) + "\n")
	for _, f := range []struct{ path, content string }{{ScriptPath, script}, {unitPath, Unit(pairs)}} {
		fmt.Fprintf(&b, "cat > %[1]s.tmp <<'MESHCTL_EOF'\n%[2]sMESHCTL_EOF\nmv %[1]s.tmp %[1]s\n", f.path, f.content)
	}
	b.WriteString("chmod 0755 " + ScriptPath + "\n")
	b.WriteString("mkdir -p " + path.Dir(wantsLink) + "\nln -sf " + unitPath + " " + wantsLink + "\n")
	b.WriteString("/bin/sh " + ScriptPath + " rules " + strings.Join(pairs, " ") + "\n")
	return []byte(b.String())
}
