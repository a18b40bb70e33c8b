package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/exec"
)

// fakeKind is an in-memory kind: clusters of nodes whose files are a map.
type fakeKind struct {
	mu       sync.Mutex
	clusters map[string]*fakeCluster
	// createHook runs inside Create before the cluster exists (tests use it
	// to block, fail or observe concurrency).
	createHook func(name string) error
	created    []string
	deleted    []string
	logs       []string
	// listErr makes List fail, as kind does on a machine without Docker.
	listErr error
	// kubeconfigs replaces the kubeconfig of a cluster: a real API server
	// standing in for a kind cluster's.
	kubeconfigs map[string]string
	// apiDown makes a cluster's API server refuse connections.
	apiDown map[string]bool
	// systemNotReady is what a cluster's kube-system reports not ready;
	// systemReadyAfter clears a cluster's after that many reads.
	systemNotReady   map[string][]string
	systemReadyAfter map[string]int
}

type fakeCluster struct {
	name    string
	cfg     *v1alpha4.Cluster
	nodes   []*fakeNode
	applied []string
}

func newFakeKind() *fakeKind { return &fakeKind{clusters: map[string]*fakeCluster{}} }

func (k *fakeKind) Create(name string, cfg *v1alpha4.Cluster, kubeconfigPath string, wait time.Duration) error {
	if k.createHook != nil {
		if err := k.createHook(name); err != nil {
			// kind retains a failed cluster's nodes when told to: so do we.
			k.add(name, cfg)
			return err
		}
	}
	// kind refuses a name in use before it makes anything (a hook may
	// have made one meanwhile, as another process would).
	if _, ok := k.cluster(name); ok {
		return fmt.Errorf("node(s) already exist for a cluster with the name %q", name)
	}
	k.add(name, cfg)
	k.mu.Lock()
	k.created = append(k.created, name)
	k.mu.Unlock()
	return nil
}

func (k *fakeKind) add(name string, cfg *v1alpha4.Cluster) *fakeCluster {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := &fakeCluster{name: name, cfg: cfg}
	workers := 0
	for i, n := range cfg.Nodes {
		nodeName := name + "-control-plane"
		if n.Role == v1alpha4.WorkerRole {
			workers++
			nodeName = fmt.Sprintf("%s-worker%s", name, map[bool]string{true: "", false: fmt.Sprint(workers)}[workers == 1])
		}
		c.nodes = append(c.nodes, &fakeNode{name: nodeName, role: string(n.Role), ip: fmt.Sprintf("172.18.%d.%d", len(k.clusters)+1, i+2), cluster: c, files: map[string][]byte{}})
	}
	k.clusters[name] = c
	return c
}

func (k *fakeKind) Delete(name, kubeconfigPath string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.clusters, name)
	k.deleted = append(k.deleted, name)
	return nil
}

func (k *fakeKind) List() ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.listErr != nil {
		return nil, k.listErr
	}
	var out []string
	for n := range k.clusters {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

func (k *fakeKind) cluster(name string) (*fakeCluster, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.clusters[name]
	return c, ok
}

func (k *fakeKind) ListNodes(name string) ([]nodes.Node, error) {
	c, ok := k.cluster(name)
	if !ok {
		return nil, nil // kind returns no nodes for a missing cluster
	}
	var out []nodes.Node
	for _, n := range c.nodes {
		out = append(out, n)
	}
	return out, nil
}

func (k *fakeKind) KubeConfig(name string, internal bool) (string, error) {
	if _, ok := k.cluster(name); !ok {
		return "", fmt.Errorf("cluster %s does not exist", name)
	}
	if kc, ok := k.kubeconfigs[name]; ok {
		return kc, nil
	}
	server := "https://127.0.0.1:40001"
	if internal {
		server = "https://" + name + "-control-plane:6443"
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kind-%[1]s
  cluster:
    server: %[2]s
    certificate-authority-data: Q0EK
contexts:
- name: kind-%[1]s
  context: {cluster: kind-%[1]s, user: kind-%[1]s}
current-context: kind-%[1]s
users:
- name: kind-%[1]s
  user:
    client-certificate-data: Q0VSVAo=
    client-key-data: S0VZCg==
`, name, server), nil
}

func (k *fakeKind) CollectLogs(name, dir string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.logs = append(k.logs, name)
	return nil
}

// fakeNode runs the few shell scripts meshctl sends to nodes against an
// in-memory file system.
type fakeNode struct {
	mu      sync.Mutex
	name    string
	role    string
	ip      string
	cluster *fakeCluster
	files   map[string][]byte
	broken  bool
	// stopped: the container does not run (exec fails; docker inspect,
	// start and cp see it).
	stopped bool
	// staleRoutes is what the route reconciler's check prints.
	staleRoutes string
}

func (n *fakeNode) String() string               { return n.name }
func (n *fakeNode) Role() (string, error)        { return n.role, nil }
func (n *fakeNode) IP() (string, string, error)  { return n.ip, "fc00::" + n.ip[len(n.ip)-1:], nil }
func (n *fakeNode) SerialLogs(w io.Writer) error { return nil }
func (n *fakeNode) Command(c string, a ...string) exec.Cmd {
	return &fakeCmd{node: n, argv: append([]string{c}, a...)}
}
func (n *fakeNode) CommandContext(_ context.Context, c string, a ...string) exec.Cmd {
	return n.Command(c, a...)
}

func (n *fakeNode) file(path string) ([]byte, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	b, ok := n.files[path]
	return b, ok
}

type fakeCmd struct {
	node   *fakeNode
	argv   []string
	stdin  io.Reader
	stdout io.Writer
}

func (c *fakeCmd) SetEnv(...string) exec.Cmd      { return c }
func (c *fakeCmd) SetStdin(r io.Reader) exec.Cmd  { c.stdin = r; return c }
func (c *fakeCmd) SetStdout(w io.Writer) exec.Cmd { c.stdout = w; return c }
func (c *fakeCmd) SetStderr(io.Writer) exec.Cmd   { return c }

// bootInstalled is where a fake node keeps the script installBoot ran.
const bootInstalled = "(boot install script)"

var (
	writeRE = regexp.MustCompile(`cat > '?([^' ]+?)(?:\.tmp && mv \S+ \S+)?'?$`)
	readRE  = regexp.MustCompile(`^test -f (\S+) && cat`)
)

func (c *fakeCmd) Run() error {
	n := c.node
	n.mu.Lock()
	down := n.broken || n.stopped
	n.mu.Unlock()
	if down {
		return &exec.RunError{Command: c.argv, Output: []byte("container is not running"), Inner: errors.New("exit status 1")}
	}
	var in []byte
	if c.stdin != nil {
		in, _ = io.ReadAll(c.stdin)
	}
	switch {
	case len(c.argv) == 2 && c.argv[0] == "sh" && c.argv[1] == "-s":
		// A script on stdin: the boot unit's install (installBoot), kept
		// as the node's install script.
		n.mu.Lock()
		n.files[bootInstalled] = in
		n.mu.Unlock()
		return nil
	case c.argv[0] == "kubectl":
		n.cluster.applied = append(n.cluster.applied, string(in))
		return nil
	case c.argv[0] == "sh" && writeRE.MatchString(c.argv[2]):
		path := writeRE.FindStringSubmatch(c.argv[2])[1]
		n.mu.Lock()
		n.files[path] = in
		n.mu.Unlock()
		return nil
	case c.argv[0] == "sh" && strings.Contains(c.argv[2], NodeRoutesScript+" check"):
		if c.stdout != nil {
			_, _ = io.WriteString(c.stdout, n.staleRoutes)
		}
		return nil
	case c.argv[0] == "sh" && readRE.MatchString(c.argv[2]):
		b, ok := n.file(readRE.FindStringSubmatch(c.argv[2])[1])
		if !ok {
			b = []byte("none\n")
		}
		if c.stdout != nil {
			_, _ = c.stdout.Write(b)
		}
		return nil
	}
	return fmt.Errorf("fake node: unexpected command %q", c.argv)
}

// fakeDocker answers the docker commands meshctl runs.
type fakeDocker struct {
	// kind holds the node containers docker inspect, start and cp see.
	kind     *fakeKind
	mu       sync.Mutex
	down     bool
	network  string // JSON IPAM config of the kind network; "" if none
	registry string // "", "running" or "stopped"
	calls    []string
	// locks are the lock containers, by name: created atomically, as the
	// engine does.
	locks     map[string]fakeLock
	lockImage bool
	lockSeq   int
	// contendedRemoval: removing a lock container lasts until another
	// client has tried to remove it too (see lockCommand).
	contendedRemoval bool
}

type fakeLock struct {
	id     string
	labels map[string]string
	// removing: a `container rm` of it is under way; its name is still
	// taken, and another rm is refused, as the engine does. refused counts
	// those.
	removing bool
	refused  int
}

// lockCommand answers the commands of the environment lock.
func (d *fakeDocker) lockCommand(args []string) ([]byte, bool, error) {
	call := strings.Join(args, " ")
	switch {
	case strings.HasPrefix(call, "image inspect"):
		if !d.lockImage {
			return nil, true, fmt.Errorf("docker %s: exit status 1: Error: No such image: %s", call, args[len(args)-1])
		}
		return []byte("sha256:1\n"), true, nil
	case strings.HasPrefix(call, "image import"):
		d.lockImage = true
		return []byte("sha256:1\n"), true, nil
	case strings.HasPrefix(call, "container create"):
		if !d.lockImage {
			return nil, true, fmt.Errorf("docker %s: exit status 1: Unable to find image", call)
		}
		name := args[3]
		if l, ok := d.locks[name]; ok {
			return nil, true, fmt.Errorf("docker %s: exit status 125: Error response from daemon: Conflict. The container name \"/%s\" is already in use by container \"%s\"", call, name, l.id)
		}
		labels := map[string]string{}
		for i := 4; i+1 < len(args); i++ {
			if args[i] == "--label" {
				k, v, _ := strings.Cut(args[i+1], "=")
				labels[k] = v
				i++
			}
		}
		if d.locks == nil {
			d.locks = map[string]fakeLock{}
		}
		d.lockSeq++
		d.locks[name] = fakeLock{id: fmt.Sprintf("lock%d", d.lockSeq), labels: labels}
		return []byte(d.locks[name].id + "\n"), true, nil
	case strings.HasPrefix(call, "container inspect"):
		ref := args[len(args)-1] // a name or an ID
		for name, l := range d.locks {
			if name == ref || l.id == ref {
				js, _ := json.Marshal(l.labels)
				return []byte(l.id + " " + string(js) + "\n"), true, nil
			}
		}
		return nil, true, fmt.Errorf("docker %s: exit status 1: Error: No such container: %s", call, ref)
	case strings.HasPrefix(call, "container rm"):
		id := args[len(args)-1]
		for name, l := range d.locks {
			if l.id != id {
				continue
			}
			if l.removing {
				l.refused++
				d.locks[name] = l
				return nil, true, fmt.Errorf("docker %s: exit status 1: Error response from daemon: removal of container %s is already in progress", call, id)
			}
			// Under contendedRemoval the removal lasts until another client
			// has tried to remove it too (at most a second), so that a race
			// over it is met whatever the scheduling; other commands run
			// meanwhile (d.mu is held by Run, released here and taken back).
			l.removing = true
			d.locks[name] = l
			for deadline := time.Now().Add(time.Second); d.contendedRemoval && d.locks[name].refused == 0 && time.Now().Before(deadline); {
				d.mu.Unlock()
				time.Sleep(time.Millisecond)
				d.mu.Lock()
			}
			delete(d.locks, name)
			return []byte(id + "\n"), true, nil
		}
		return nil, true, fmt.Errorf("docker %s: exit status 1: Error response from daemon: No such container: %s", call, id)
	}
	return nil, false, nil
}

func (d *fakeDocker) Run(_ context.Context, args ...string) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	call := strings.Join(args, " ")
	d.calls = append(d.calls, call)
	if d.down {
		return nil, errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?")
	}
	if out, err, ok := d.node(args); ok {
		return out, err
	}
	if out, ok, err := d.lockCommand(args); ok {
		return out, err
	}
	switch {
	case args[0] == "info":
		return []byte("28.2.2\n"), nil
	case strings.HasPrefix(call, "network ls"):
		if d.network == "" {
			return nil, nil
		}
		return []byte("kind\n"), nil
	case strings.HasPrefix(call, "network inspect kind --format {{json"):
		return []byte(d.network), nil
	case strings.HasPrefix(call, "network inspect kind --format {{len"):
		if d.registry != "" {
			return []byte("1\n"), nil
		}
		return []byte("0\n"), nil
	case strings.HasPrefix(call, "network rm"):
		d.network = ""
		return nil, nil
	case strings.HasPrefix(call, "network connect"):
		return nil, nil
	case args[0] == "inspect":
		if d.registry == "" {
			return nil, fmt.Errorf("docker %s: exit status 1: Error: No such object: %s", call, args[len(args)-1])
		}
		return []byte(fmt.Sprint(d.registry == "running") + "\n"), nil
	case args[0] == "run":
		d.registry = "running"
		return []byte("abc123\n"), nil
	case args[0] == "start":
		d.registry = "running"
		return nil, nil
	case args[0] == "rm":
		d.registry = ""
		return nil, nil
	}
	return nil, fmt.Errorf("fake docker: unexpected command %q", call)
}

// findNode finds a node container by name.
func (k *fakeKind) findNode(name string) *fakeNode {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.clusters {
		for _, n := range c.nodes {
			if n.name == name {
				return n
			}
		}
	}
	return nil
}

// node answers docker commands on node containers.
func (d *fakeDocker) node(args []string) ([]byte, error, bool) {
	switch {
	case args[0] == "inspect" && len(args) > 3 && args[2] == "{{.Name}} {{.State.Running}} {{.State.StartedAt}}":
		var out bytes.Buffer
		for _, name := range args[3:] {
			n := d.kind.findNode(name)
			if n == nil {
				return out.Bytes(), fmt.Errorf("docker inspect: exit status 1: Error: No such object: %s", name), true
			}
			n.mu.Lock()
			fmt.Fprintf(&out, "/%s %v %s\n", name, !n.stopped, "2026-12-07T15:00:00.123456789Z")
			n.mu.Unlock()
		}
		return out.Bytes(), nil, true
	case args[0] == "start" && d.kind.findNode(args[1]) != nil:
		for _, name := range args[1:] {
			if n := d.kind.findNode(name); n != nil {
				n.mu.Lock()
				n.stopped = false
				n.mu.Unlock()
			}
		}
		return nil, nil, true
	case args[0] == "cp":
		name, path, _ := strings.Cut(args[1], ":")
		n := d.kind.findNode(name)
		if n == nil {
			return nil, fmt.Errorf("docker cp: Error response from daemon: No such container: %s", name), true
		}
		b, ok := n.file(path)
		if !ok {
			return nil, fmt.Errorf("docker cp: Error response from daemon: Could not find the file %s in container %s", path, name), true
		}
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: filepath.Base(path), Mode: 0o644, Size: int64(len(b))})
		_, _ = tw.Write(b)
		_ = tw.Close()
		return buf.Bytes(), nil, true
	}
	return nil, nil, false
}

func (d *fakeDocker) called(prefix string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// System reports a fake cluster's systemNotReady, and a real API server's
// kube-system.
func (r fakeNodeReader) System(ctx context.Context, kubeconfig []byte, started map[string]time.Time) ([]string, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || !strings.HasPrefix(kctx.Cluster, "kind-") {
		return apiNodeReader{}.System(ctx, kubeconfig, started)
	}
	name := strings.TrimPrefix(kctx.Cluster, "kind-")
	r.kind.mu.Lock()
	defer r.kind.mu.Unlock()
	probs := r.kind.systemNotReady[name]
	if n, ok := r.kind.systemReadyAfter[name]; ok {
		if n <= 1 {
			delete(r.kind.systemNotReady, name)
		}
		r.kind.systemReadyAfter[name] = n - 1
	}
	return probs, nil
}

// fakeNodeReader reports a fake cluster's nodes, found through the
// kubeconfig's cluster name, as Ready; it reads any other cluster's nodes
// from its real API server.
type fakeNodeReader struct{ kind *fakeKind }

func (r fakeNodeReader) Nodes(_ context.Context, kubeconfig []byte) ([]NodeStatus, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || !strings.HasPrefix(kctx.Cluster, "kind-") {
		// Not a fake kind cluster: an existing cluster, which tests
		// stand up as a real API server.
		return apiNodeReader{}.Nodes(context.Background(), kubeconfig)
	}
	name := strings.TrimPrefix(kctx.Cluster, "kind-")
	c, ok := r.kind.cluster(name)
	r.kind.mu.Lock()
	down := r.kind.apiDown[name]
	r.kind.mu.Unlock()
	if !ok || down {
		return nil, fmt.Errorf("connection refused")
	}
	var out []NodeStatus
	for _, n := range c.nodes {
		out = append(out, NodeStatus{Name: n.name, Role: n.role, Ready: true, IPs: []string{n.ip}})
	}
	return out, nil
}

var _ = bytes.NewReader
