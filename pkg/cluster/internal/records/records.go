// Package records reads and writes meshctl's records of its clusters: the
// record on a kind cluster's control-plane node (the plan it was created
// from, and what meshctl learned since), its local copy with the progress of
// the cluster's creation, and the local record of an existing cluster.
// Their format is model.Record; where they live is the caller's to say.
package records

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kind/pkg/cluster/nodes"

	"github.com/meshctl/meshctl/internal/fsutil"
	"github.com/meshctl/meshctl/pkg/cluster/internal/kindprovider"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// NodePath is where meshctl keeps, on a cluster's control-plane node, the
// plan the cluster was created from. Keeping it in the cluster rather than in
// a local state file means `up`, `status` and `down` find the truth even when
// the artifacts directory is gone (a fresh CI workspace, another shell).
const NodePath = "/kind/meshctl/cluster.json"

// ErrNone means the cluster exists but meshctl did not (finish to) create it.
var ErrNone = errors.New("no meshctl record")

// Docker runs docker CLI commands.
type Docker interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// ReadNode reads the record on a running control-plane node; ErrNone when
// it has none.
func ReadNode(cp nodes.Node) (*model.Record, error) {
	var out bytes.Buffer
	// `cat` of a missing file and a stopped container both fail; test -f
	// tells them apart so that "not ours" is not mistaken for "broken".
	cmd := cp.Command("sh", "-c", "test -f "+NodePath+" && cat "+NodePath+" || echo none")
	cmd.SetStdout(&out)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("reading meshctl record on %s: %w", cp, kindprovider.RunErr(err))
	}
	if strings.TrimSpace(out.String()) == "none" {
		return nil, ErrNone
	}
	var r model.Record
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("meshctl record on %s is corrupt: %w", cp, err)
	}
	return &r, nil
}

// WriteNode writes the record on a control-plane node.
func WriteNode(cp nodes.Node, r model.Record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding record: %w", err)
	}
	// Written beside and renamed: other meshctl processes read records at
	// any time (pools are claimed concurrently), and must never see half
	// of one.
	cmd := cp.Command("sh", "-c", "mkdir -p /kind/meshctl && cat > "+NodePath+".tmp && mv "+NodePath+".tmp "+NodePath)
	cmd.SetStdin(bytes.NewReader(data))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("writing meshctl record on %s: %w", cp, kindprovider.RunErr(err))
	}
	return nil
}

// ReadStopped reads the record from a control-plane container that does
// not run: `docker cp` reads a stopped container's files, where exec
// cannot. ErrNone when it has none.
func ReadStopped(ctx context.Context, d Docker, cp nodes.Node) (*model.Record, error) {
	out, err := d.Run(ctx, "cp", cp.String()+":"+NodePath, "-")
	if err != nil {
		if strings.Contains(err.Error(), "Could not find the file") || strings.Contains(err.Error(), "No such") {
			return nil, ErrNone
		}
		return nil, fmt.Errorf("reading meshctl record of stopped %s: %w", cp, err)
	}
	tr := tar.NewReader(bytes.NewReader(out))
	if _, err := tr.Next(); err != nil {
		return nil, fmt.Errorf("reading meshctl record of stopped %s: %w", cp, err)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		return nil, fmt.Errorf("reading meshctl record of stopped %s: %w", cp, err)
	}
	var r model.Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("meshctl record on %s is corrupt: %w", cp, err)
	}
	return &r, nil
}

// LocalFile is meshctl's local copy of a kind cluster's record, in the
// cluster's artifacts directory. Written with InProgress before kind starts
// creating the cluster, and again when the record is on the node, it tells
// a cluster whose creation was killed from a foreign kind cluster, and a
// cluster deleted behind meshctl's back from one never planned.
const LocalFile = "kind.json"

// Local is a Record with the progress of its creation.
type Local struct {
	model.Record
	// InProgress: creation started and has not finished.
	InProgress bool `json:"inProgress,omitempty"`
}

// WriteLocal writes a kind cluster's local record at path.
func WriteLocal(path string, r model.Record, inProgress bool) error {
	data, err := json.MarshalIndent(Local{Record: r, InProgress: inProgress}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding record: %w", err)
	}
	if err := WritePrivate(path, data); err != nil {
		return fmt.Errorf("cluster %q: %w", r.Cluster.Name, err)
	}
	return nil
}

// ReadLocal reads the local records of kind clusters in files. A corrupt
// one is skipped with a warning: it only adds to what the nodes say.
func ReadLocal(files []string, warnf func(format string, args ...any)) []Local {
	var out []Local
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			warnf("reading %s: %v", f, err)
			continue
		}
		var r Local
		if err := json.Unmarshal(data, &r); err != nil || r.Cluster.KindName == "" {
			warnf("ignoring corrupt meshctl record %s: %v", f, err)
			continue
		}
		out = append(out, r)
	}
	return out
}

// ExistingFile is the local record of an existing cluster, in its
// directory under the artifacts directory. A kind cluster's record lives on
// its node, found by listing kind clusters; an existing cluster cannot be
// found from the environment's name alone (nothing lists "every cluster
// someone has a kubeconfig for"), so the record that points at it — the
// kubeconfig path and context — has to be local. The in-cluster claim
// (model.ClaimNamespace/ClaimName) complements it for what only the cluster
// can tell: who else uses it.
const ExistingFile = "existing.json"

// WriteExisting writes an existing cluster's local record at path.
func WriteExisting(path string, rec model.Record) error {
	raw, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding record: %w", err)
	}
	return WritePrivate(path, raw)
}

// ReadExisting reads the local records of existing clusters in files.
func ReadExisting(files []string) ([]model.Record, error) {
	var out []model.Record
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		var r model.Record
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("existing-cluster record %s is corrupt: %w", f, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// WritePrivate writes a file with mode 0600 in a 0700 directory,
// atomically: records and kubeconfigs hold credentials or point at them.
func WritePrivate(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	return fsutil.WriteFile(path, data, 0o600)
}
