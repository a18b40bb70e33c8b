// Package kindprovider is kind's cluster provider, linked as a library, in
// the shape pkg/cluster's Kind interface asks for.
package kindprovider

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshctl/meshctl/pkg/cluster/internal/freezer"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	"sigs.k8s.io/kind/pkg/exec"
	"sigs.k8s.io/kind/pkg/log"
)

// Provider adapts kind's cluster.Provider, linked as a library.
type Provider struct {
	*kindcluster.Provider
	logger log.Logger
}

// New returns kind's Docker provider, logging through logger.
func New(logger log.Logger) Provider {
	// kind's own messages ("Deleted nodes: …") go one level down, shown
	// with -v 1: meshctl's status lines already say what happens.
	base := logger
	if n, ok := logger.(namer); ok {
		base = n.Named("kind", 1)
	}
	return Provider{Provider: newKind(base), logger: logger}
}

func newKind(logger log.Logger) *kindcluster.Provider {
	return kindcluster.NewProvider(
		kindcluster.ProviderWithLogger(logger),
		// Always Docker: meshctl's registry, network checks and e2e tier
		// are Docker's; kind would otherwise guess from what is installed.
		kindcluster.ProviderWithDocker(),
	)
}

// namer is implemented by loggers that can prefix lines with a name.
type namer interface {
	Named(name string, shift int) log.Logger
}

// Create creates a cluster from cfg, waiting up to wait for it to be ready,
// and leaves it in place on failure.
func (k Provider) Create(name string, cfg *v1alpha4.Cluster, kubeconfigPath string, wait time.Duration) error {
	// Several clusters are created at once: each gets a provider whose log
	// lines carry the cluster's name, one level down (shown with -v 1) so
	// that meshctl's own status lines stay readable.
	provider := k.Provider
	if n, ok := k.logger.(namer); ok {
		provider = newKind(n.Named(name, 1))
	}
	return provider.Create(name,
		kindcluster.CreateWithV1Alpha4Config(cfg),
		// Retained so that meshctl can collect logs of a failed cluster
		// before it deletes it (unless the user asked to keep it).
		kindcluster.CreateWithRetain(true),
		kindcluster.CreateWithWaitForReady(wait),
		kindcluster.CreateWithKubeconfigPath(kubeconfigPath),
		kindcluster.CreateWithDisplayUsage(false),
		kindcluster.CreateWithDisplaySalutation(false),
	)
}

// Delete deletes a cluster's nodes. When Docker cannot kill a node because
// a cgroup inside it was left frozen (see package freezer), the node's
// frozen cgroups are thawed and the delete is tried once more; the first
// error stands when nothing was frozen.
func (k Provider) Delete(name, kubeconfigPath string) error {
	err := k.Provider.Delete(name, kubeconfigPath)
	if err == nil {
		return nil
	}
	ns, lerr := k.ListNodes(name)
	if lerr != nil || len(ns) == 0 {
		return err
	}
	var thawed []string
	for _, n := range ns {
		t, terr := thawNode(n.String())
		if terr != nil {
			k.logger.Warnf("node %s: %v", n, terr)
		}
		thawed = append(thawed, t...)
	}
	if len(thawed) == 0 {
		return err
	}
	k.logger.Warnf("kind cluster %s: Docker could not kill its nodes (%v); thawed %d frozen cgroup(s) left by an interrupted runc, deleting again",
		name, err, len(thawed))
	if rerr := k.Provider.Delete(name, kubeconfigPath); rerr != nil {
		return fmt.Errorf("%w (again after thawing %d frozen cgroup(s): %w)", err, len(thawed), rerr)
	}
	return nil
}

// thawNode thaws the frozen cgroups of a node container: those of its
// first process, or — when Docker no longer has one — the places Docker's
// cgroupfs and systemd drivers put a container's cgroup.
func thawNode(node string) ([]string, error) {
	lines, err := exec.OutputLines(exec.Command("docker", "inspect", "--format", "{{.State.Pid}} {{.Id}}", node))
	if err != nil || len(lines) == 0 {
		return nil, fmt.Errorf("inspecting it: %w", RunErr(err))
	}
	var pid int
	var id string
	if _, err := fmt.Sscan(lines[0], &pid, &id); err != nil {
		return nil, fmt.Errorf("reading docker inspect's %q: %w", lines[0], err)
	}
	var dirs []string
	if pid > 0 {
		if dirs, err = freezer.Dirs(freezer.Root, pid); err != nil {
			return nil, err
		}
	}
	if len(dirs) == 0 {
		for _, h := range []string{"freezer", ""} {
			dirs = append(dirs,
				filepath.Join(freezer.Root, h, "docker", id),
				filepath.Join(freezer.Root, h, "system.slice", "docker-"+id+".scope"))
		}
	}
	var out []string
	for _, d := range dirs {
		t, err := freezer.Thaw(d)
		out = append(out, t...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// ControlPlane is a kind cluster's first control-plane node.
func ControlPlane(ns []nodes.Node) (nodes.Node, error) {
	cps, err := nodeutils.ControlPlaneNodes(ns)
	if err != nil {
		return nil, fmt.Errorf("finding control-plane node: %w", err)
	}
	if len(cps) == 0 {
		return nil, fmt.Errorf("no control-plane node")
	}
	return cps[0], nil
}

// RunErr adds a failed command's output to its error: kind's RunError keeps
// the output but does not print it.
func RunErr(err error) error {
	if re := exec.RunErrorForError(err); re != nil && len(re.Output) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(re.Output)))
	}
	return err
}
