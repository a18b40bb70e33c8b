package cluster

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster/internal/kindprovider"
	"github.com/meshctl/meshctl/pkg/cluster/internal/records"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// A cluster's state, as status reports it.
const (
	StateRunning = "running"
	// StateStopped: a node container is not running (docker stop, a
	// reboot with containers not set to restart).
	StateStopped = "stopped"
	// StateNotReady: the containers run but the API server does not
	// answer, or a node is NotReady.
	StateNotReady = "not ready"
	// StateMissing: meshctl recorded the cluster (in the artifacts
	// directory) but no kind cluster of that name exists.
	StateMissing = "missing"
	// StateIncomplete: meshctl began creating the cluster and did not
	// finish (the run was killed); up recreates it, down deletes it.
	StateIncomplete = "incomplete"
	// StateRoutesStale: a node's routes to a peer cluster do not point at
	// the peer node's current address.
	StateRoutesStale = "routes stale"
	// StateRemoteSecretsStale: a remote secret the cluster holds is
	// missing or names an API server other than the one `up` would write
	// now (pkg/mesh's status checks them).
	StateRemoteSecretsStale = "remote secrets stale"
)

// Paths on kind nodes of the route reconciler pkg/connect/routes installs: the
// routes to peer clusters keyed by peer node name, and the script that
// resolves the names and keeps the kernel's routes in step. Status runs the
// script's check mode; pkg/connect/routes writes both.
const (
	NodeRoutesFile   = "/kind/meshctl/routes"
	NodeRoutesScript = "/kind/meshctl/routes.sh"
)

// dockerHint says how to get a Docker engine; every command that needs one
// ends its error with it.
const dockerHint = "Start Docker (`systemctl start docker`; on a machine without one, `make e2e-env` installs it) and check that `docker info` works"

// dockerUnreachable is the error of every command that needs Docker and
// cannot reach it: what is wrong, and how to fix it.
func dockerUnreachable(err error) error {
	return fmt.Errorf("%w: %v\n%s", ErrNoDocker, err, dockerHint)
}

// checkDocker asks the Docker engine for its version.
func (p *Provider) checkDocker(ctx context.Context) error {
	if _, err := p.docker.Run(ctx, "info", "--format", "{{.ServerVersion}}"); err != nil {
		return dockerUnreachable(err)
	}
	return nil
}

// nodeContainer is a node container as Docker tells it.
type nodeContainer struct {
	name    string
	running bool
	// started is when it last started: a kind node's Kubernetes node (its
	// container's name) reports anew only after that.
	started time.Time
}

// nodeContainers inspects the node containers of a kind cluster, in
// kind's order, with one docker command.
func (p *Provider) nodeContainers(ctx context.Context, kindName string) ([]nodeContainer, error) {
	ns, err := p.kind.ListNodes(kindName)
	if err != nil {
		return nil, fmt.Errorf("listing nodes of %s: %w", kindName, err)
	}
	if len(ns) == 0 {
		return nil, nil
	}
	args := []string{"inspect", "--format", "{{.Name}} {{.State.Running}} {{.State.StartedAt}}"}
	for _, n := range ns {
		args = append(args, n.String())
	}
	out, err := p.docker.Run(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("inspecting node containers: %w", err)
	}
	seen := map[string]nodeContainer{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		started, err := time.Parse(time.RFC3339Nano, f[2])
		if err != nil {
			return nil, fmt.Errorf("node container %s started at %q: %w", f[0], f[2], err)
		}
		name := strings.TrimPrefix(f[0], "/")
		seen[name] = nodeContainer{name: name, running: f[1] == "true", started: started}
	}
	out2 := make([]nodeContainer, 0, len(ns))
	for _, n := range ns {
		c, ok := seen[n.String()]
		if !ok {
			c = nodeContainer{name: n.String()} // not told: not running
		}
		out2 = append(out2, c)
	}
	return out2, nil
}

// stoppedOf names the containers of cs that do not run.
func stoppedOf(cs []nodeContainer) []string {
	var stopped []string
	for _, c := range cs {
		if !c.running {
			stopped = append(stopped, c.name)
		}
	}
	return stopped
}

// startsOf is when each container of cs last started, by name: what
// readAPI judges a node's kube-system pods against.
func startsOf(cs []nodeContainer) map[string]time.Time {
	started := make(map[string]time.Time, len(cs))
	for _, c := range cs {
		started[c.name] = c.started
	}
	return started
}

// stoppedNodes lists the node containers of a kind cluster that do not run.
func (p *Provider) stoppedNodes(ctx context.Context, kindName string) ([]string, error) {
	cs, err := p.nodeContainers(ctx, kindName)
	if err != nil {
		return nil, err
	}
	return stoppedOf(cs), nil
}

// readStoppedRecord reads meshctl's record from a control-plane container
// that does not run. records.ErrNone when it has none.
func (p *Provider) readStoppedRecord(ctx context.Context, kindName string) (*model.Record, error) {
	ns, err := p.kind.ListNodes(kindName)
	if err != nil {
		return nil, fmt.Errorf("listing nodes of %s: %w", kindName, err)
	}
	cp, err := kindprovider.ControlPlane(ns)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", kindName, err)
	}
	return records.ReadStopped(ctx, p.docker, cp)
}

func (p *Provider) localRecordPath(env, cluster string) string {
	return filepath.Join(p.clusterDir(env, cluster), records.LocalFile)
}

func (p *Provider) writeLocalRecord(r model.Record, inProgress bool) error {
	return records.WriteLocal(p.localRecordPath(r.Env, r.Cluster.Name), r, inProgress)
}

// localRecords reads every local record of kind clusters, of every
// environment.
func (p *Provider) localRecords() []records.Local {
	files, _ := filepath.Glob(filepath.Join(p.artifacts, "*", "*", records.LocalFile))
	return records.ReadLocal(files, p.logger.Warnf)
}

// startNodes starts a kind cluster's stopped node containers. kind's node
// entrypoint brings kubelet and the control plane back, and rewrites the
// node's own address where it changed.
func (p *Provider) startNodes(ctx context.Context, stopped []string) error {
	if len(stopped) == 0 {
		return nil
	}
	// A started container may have another address: nothing read of the
	// clusters before holds.
	defer p.snap.forget()
	if _, err := p.docker.Run(ctx, append([]string{"start"}, stopped...)...); err != nil {
		return fmt.Errorf("starting %s: %w", strings.Join(stopped, ", "), err)
	}
	return nil
}

// waitReady waits until a cluster's API server answers with every node
// Ready, and, given when its node containers started, with its kube-system
// workloads ready too (readAPI), up to wait, looking every poll.
func (p *Provider) waitReady(ctx context.Context, c model.ClusterPlan, wait, poll time.Duration, started map[string]time.Time) error {
	deadline := time.Now().Add(wait)
	for {
		st := p.readAPI(ctx, c, started)
		if st.Ready {
			return nil
		}
		why := st.Error
		if why == "" {
			why = notReadyWhy(st)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster %q not ready after %s: %s", c.Name, wait, why)
		}
		p.logger.V(1).Infof("cluster %q: waiting to be ready: %s", c.Name, why)
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster %q: waiting to be ready: %w", c.Name, context.Cause(ctx))
		case <-time.After(poll):
		}
	}
}

// notReadyWhy says why a cluster whose API server answers is not Ready.
func notReadyWhy(st ClusterStatus) string {
	if len(st.SystemNotReady) > 0 {
		return "system pods not ready: " + strings.Join(st.SystemNotReady, "; ")
	}
	return "nodes not ready: " + notReadyNodes(st)
}

func notReadyNodes(st ClusterStatus) string {
	var nr []string
	for _, n := range st.Nodes {
		if !n.Ready {
			nr = append(nr, n.Name)
		}
	}
	if len(nr) == 0 {
		return fmt.Sprintf("%d of %d nodes registered", len(st.Nodes), st.ControlPlanes+st.Workers)
	}
	return "NotReady: " + strings.Join(nr, ", ")
}

// routeProblems runs the route reconciler's check on every running node of
// a kind cluster: each line it prints is a route that does not point where
// the peer node's name resolves now (or a name that does not resolve). A
// node without the reconciler (connect never ran) has nothing to check.
func (p *Provider) routeProblems(ctx context.Context, kindName string) []string {
	ns, err := p.kind.ListNodes(kindName)
	if err != nil {
		return nil
	}
	probs := make([][]string, len(ns))
	_ = parallel.ForEach(indexes(len(ns)), func(i int) error {
		var out bytes.Buffer
		cmd := ns[i].CommandContext(ctx, "sh", "-c", "if [ -x "+NodeRoutesScript+" ]; then "+NodeRoutesScript+" check; fi")
		cmd.SetStdout(&out)
		if err := cmd.Run(); err != nil {
			probs[i] = []string{fmt.Sprintf("node %s: checking routes: %v", ns[i], kindprovider.RunErr(err))}
			return nil
		}
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				probs[i] = append(probs[i], fmt.Sprintf("node %s: %s", ns[i], l))
			}
		}
		return nil
	})
	var all []string
	for _, ps := range probs {
		all = append(all, ps...)
	}
	return all
}
