package routes

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"path"
	"strings"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster"
)

// The route reconciler keeps a node's routes to peer clusters right when
// the peers' addresses change (a Docker restart gives every node container
// a new address; kind repairs a node's own address, not its peers'). It is
// a shell loop under the node's systemd, not a Pod: routes are the node's
// business, it must work when connect runs without the dataplane install
// (no meshctl image on the node, no CNI), and it must come back before
// Kubernetes does — systemd starts it with the container. It reads the
// routes keyed by peer node NAME, resolves the names through Docker's DNS
// on the kind network every few seconds, and `ip route replace`s what
// changed. `routes.sh check` prints every route that is not where its peer
// is now: what `meshctl status` reports as stale.
//
//go:embed routes.sh
var reconcilerScript string

// reconcilerUnit is the systemd unit that runs the reconciler on a kind node.
const reconcilerUnit = `[Unit]
Description=meshctl: routes to peer clusters, re-resolved by node name
After=network-online.target

[Service]
ExecStart=/bin/sh ` + cluster.NodeRoutesScript + ` run
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
`

// ReconcilerUnitName is the reconciler's systemd unit on kind nodes.
const ReconcilerUnitName = "meshctl-routes.service"

// RoutesByName is a node's routes file: one "<destination> <peer node>"
// line per route.
func RoutesByName(rs []Route) []byte {
	var b bytes.Buffer
	for _, r := range rs {
		fmt.Fprintf(&b, "%s %s\n", r.Dst, r.ViaNode)
	}
	return b.Bytes()
}

// nodeFiles are where installScript puts the reconciler's files.
type nodeFiles struct{ routes, script, unit string }

// kindNode is where they are on a kind node.
var kindNode = nodeFiles{cluster.NodeRoutesFile, cluster.NodeRoutesScript, "/etc/systemd/system/" + ReconcilerUnitName}

// installScript is the shell script (run with `sh -s` on the node) that
// writes the routes file, the reconciler and its unit, and (re)starts it —
// only when a file changed or the unit is not enabled and running. A rerun
// of up on a node that has them all as they would be written would
// restart the same script on the same files: skipping the daemon-reload
// and restart (the costly part, and a gap of a few seconds in the
// reconciling) changes nothing. A node container restarted since keeps its
// files and starts the enabled unit at boot; one whose unit was stopped or
// disabled, or whose files were lost or edited, gets them (re)written and
// restarted as before.
func installScript(f nodeFiles, rs []Route) []byte {
	var b strings.Builder
	heredoc := func(path, content string) {
		fmt.Fprintf(&b, "cat > %s.tmp <<'MESHCTL_EOF'\n%sMESHCTL_EOF\n", path, content)
		fmt.Fprintf(&b, "if same %[1]s.tmp %[1]s; then rm -f %[1]s.tmp; else mv %[1]s.tmp %[1]s; changed=1; fi\n", path)
	}
	// cksum is POSIX (cmp is not on every node image).
	fmt.Fprintf(&b, "set -e\nchanged=\nsame() { [ -f \"$2\" ] && [ \"$(cksum < \"$1\")\" = \"$(cksum < \"$2\")\" ]; }\nmkdir -p %s\n", path.Dir(f.routes))
	heredoc(f.routes, string(RoutesByName(rs)))
	heredoc(f.script, reconcilerScript)
	b.WriteString("chmod 0755 " + f.script + "\n")
	heredoc(f.unit, reconcilerUnit)
	u := ReconcilerUnitName
	b.WriteString("if [ -n \"$changed\" ] || ! systemctl is-enabled --quiet " + u + " || ! systemctl is-active --quiet " + u + "; then\n")
	b.WriteString("\tsystemctl daemon-reload\n\tsystemctl enable " + u + " >/dev/null 2>&1\n\tsystemctl restart " + u + "\nfi\n")
	return []byte(b.String())
}

// connectScript is what Connect runs on a node in one `sh -s`: Apply's
// batch of routes, then installScript. One command per node instead of two:
// each `docker exec` costs a no-op re-run a fifth of a second.
func connectScript(f nodeFiles, rs []Route) []byte {
	var b strings.Builder
	if len(rs) > 0 {
		fmt.Fprintf(&b, "ip -batch - <<'MESHCTL_EOF' || { echo \"adding %d routes failed\" >&2; exit 3; }\n%sMESHCTL_EOF\n", len(rs), Batch(rs))
	}
	b.Write(installScript(f, rs))
	return []byte(b.String())
}

// ApplyAndInstall gives every node of a plan its routes (Apply's batch)
// and, by peer node name, the reconciler that keeps them when addresses
// change: one command per node, all nodes at once.
func ApplyAndInstall(ctx context.Context, x Executor, plan []NodeRoutes) error {
	return parallel.ForEach(plan, func(nr NodeRoutes) error {
		if err := x.Exec(ctx, nr.Cluster, nr.Node, connectScript(kindNode, nr.Routes), "sh", "-s"); err != nil {
			return fmt.Errorf("cluster %q: node %s: adding %d routes and installing the route reconciler: %w", nr.Cluster, nr.Node, len(nr.Routes), err)
		}
		return nil
	})
}
