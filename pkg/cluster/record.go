package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	"sigs.k8s.io/kind/pkg/exec"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// recordPath is where meshctl keeps, on a cluster's control-plane node, the
// plan the cluster was created from. Keeping it in the cluster rather than in
// a local state file means `up`, `status` and `down` find the truth even when
// the artifacts directory is gone (a fresh CI workspace, another shell).
const recordPath = "/kind/meshctl/cluster.json"

// errNoRecord means the cluster exists but meshctl did not (finish to) create it.
var errNoRecord = fmt.Errorf("no meshctl record")

func controlPlane(ns []nodes.Node) (nodes.Node, error) {
	cps, err := nodeutils.ControlPlaneNodes(ns)
	if err != nil {
		return nil, fmt.Errorf("finding control-plane node: %w", err)
	}
	if len(cps) == 0 {
		return nil, fmt.Errorf("no control-plane node")
	}
	return cps[0], nil
}

func (p *Provider) readRecord(kindName string) (*model.Record, error) {
	ns, err := p.kind.ListNodes(kindName)
	if err != nil {
		return nil, fmt.Errorf("listing nodes of %s: %w", kindName, err)
	}
	cp, err := controlPlane(ns)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", kindName, err)
	}
	var out bytes.Buffer
	// `cat` of a missing file and a stopped container both fail; test -f
	// tells them apart so that "not ours" is not mistaken for "broken".
	cmd := cp.Command("sh", "-c", "test -f "+recordPath+" && cat "+recordPath+" || echo none")
	cmd.SetStdout(&out)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("reading meshctl record on %s: %w", cp, runErr(err))
	}
	if strings.TrimSpace(out.String()) == "none" {
		return nil, errNoRecord
	}
	var r model.Record
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("meshctl record on %s is corrupt: %w", cp, err)
	}
	return &r, nil
}

func (p *Provider) writeRecord(ns []nodes.Node, r model.Record) error {
	cp, err := controlPlane(ns)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding record: %w", err)
	}
	// Written beside and renamed: other meshctl processes read records at
	// any time (pools are claimed concurrently), and must never see half
	// of one.
	cmd := cp.Command("sh", "-c", "mkdir -p /kind/meshctl && cat > "+recordPath+".tmp && mv "+recordPath+".tmp "+recordPath)
	cmd.SetStdin(bytes.NewReader(data))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("writing meshctl record on %s: %w", cp, runErr(err))
	}
	return nil
}

// SetPools records a kind cluster's load-balancer pools in meshctl's record
// of it, keeping the rest of the record.
func (p *Provider) SetPools(ctx context.Context, kindName string, pools *model.Pools) error {
	rec, err := p.readRecord(kindName)
	if err != nil {
		return fmt.Errorf("recording the load-balancer pools of kind cluster %s: %w", kindName, err)
	}
	rec.Pools = pools
	ns, err := p.kind.ListNodes(kindName)
	if err != nil {
		return fmt.Errorf("listing nodes of %s: %w", kindName, err)
	}
	if err := p.writeRecord(ns, *rec); err != nil {
		return fmt.Errorf("recording the load-balancer pools of kind cluster %s: %w", kindName, err)
	}
	return nil
}

// runErr adds a failed command's output to its error: kind's RunError keeps
// the output but does not print it.
func runErr(err error) error {
	if re := exec.RunErrorForError(err); re != nil && len(re.Output) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(re.Output)))
	}
	return err
}
