package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/pkg/install/image"
)

// Docker runs the docker CLI: `docker args...` with stdin, returning its
// standard output; a failure carries standard error.
type Docker interface {
	Run(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error)
}

type execDocker struct{}

func (execDocker) Run(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// dockerSubnets reads a docker network's subnets.
func dockerSubnets(ctx context.Context, d Docker, network string) ([]netip.Prefix, error) {
	out, err := d.Run(ctx, nil, "network", "inspect", network, "--format", "{{json .IPAM.Config}}")
	if err != nil {
		return nil, fmt.Errorf("reading the subnets of docker network %q (kind creates it with the first cluster): %w", network, err)
	}
	var cfg []struct{ Subnet string }
	if err := json.Unmarshal(bytes.TrimSpace(out), &cfg); err != nil {
		return nil, fmt.Errorf("docker network %q: unexpected IPAM config %q: %w", network, out, err)
	}
	var ps []netip.Prefix
	for _, c := range cfg {
		p, err := netip.ParsePrefix(c.Subnet)
		if err != nil {
			return nil, fmt.Errorf("docker network %q: subnet %q: %w", network, c.Subnet, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// dockerLoader side-loads images into kind nodes as `kind load docker-image`
// does: docker save, then an import into each node's containerd. An image
// the docker engine does not have is left to the nodes to pull (upstream
// images on a machine with a registry); one a node already has is skipped,
// so reruns cost a lookup per node.
type dockerLoader struct {
	docker Docker
	logger log.Logger

	// The archives saved so far, by the images they hold: Install loads
	// MetalLB's images into every cluster of an environment at the same
	// moment, and one `docker save` (≈ 110 MB written, CPU the clusters'
	// creation is short of) serves them all. Removed by release when
	// Install ends.
	mu       sync.Mutex
	dir      string
	archives map[string]*archive
}

// archive is one `docker save`, made once for every caller that needs it.
type archive struct {
	once sync.Once
	path string
	err  error
}

// save returns an archive of refs, saving it on first need.
func (l *dockerLoader) save(ctx context.Context, refs []string) (string, error) {
	l.mu.Lock()
	if l.dir == "" {
		dir, err := os.MkdirTemp("", "meshctl-image-")
		if err != nil {
			l.mu.Unlock()
			return "", fmt.Errorf("saving %s: %w", strings.Join(refs, ", "), err)
		}
		l.dir, l.archives = dir, map[string]*archive{}
	}
	key := strings.Join(refs, " ")
	a, ok := l.archives[key]
	if !ok {
		a = &archive{path: filepath.Join(l.dir, fmt.Sprintf("images-%d.tar", len(l.archives)))}
		l.archives[key] = a
	}
	l.mu.Unlock()
	a.once.Do(func() {
		_, a.err = l.docker.Run(ctx, nil, append([]string{"save", "-o", a.path}, refs...)...) // docker's error names the images
	})
	return a.path, a.err
}

// release removes the archives saved so far.
func (l *dockerLoader) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dir != "" {
		os.RemoveAll(l.dir)
	}
	l.dir, l.archives = "", nil
}

func (l *dockerLoader) LoadImages(ctx context.Context, kindName string, images ...string) error {
	out, err := l.docker.Run(ctx, nil, "ps", "--filter", "label=io.x-k8s.kind.cluster="+kindName, "--format", "{{.Names}}")
	if err != nil {
		return fmt.Errorf("listing the nodes of kind cluster %s: %w", kindName, err)
	}
	nodes := strings.Fields(string(out))
	if len(nodes) == 0 {
		return fmt.Errorf("kind cluster %s has no running node", kindName)
	}
	// what each node's containerd already has, as containerd names images
	have := make(map[string]map[string]bool, len(nodes))
	for _, node := range nodes {
		out, err := l.docker.Run(ctx, nil, "exec", node, "ctr", "--namespace=k8s.io", "images", "list", "-q")
		if err != nil {
			return fmt.Errorf("listing the images of node %s: %w", node, err)
		}
		have[node] = map[string]bool{}
		for _, n := range strings.Fields(string(out)) {
			have[node][n] = true
		}
	}
	var inDocker []string
	for _, ref := range images {
		if _, err := l.docker.Run(ctx, nil, "image", "inspect", "--format", "{{.Id}}", ref); err != nil {
			l.logger.V(1).Infof("%s: image %s is not in the docker engine; the nodes will pull it", kindName, ref)
			continue
		}
		inDocker = append(inDocker, ref)
	}
	var want []image.NodeImages
	for _, node := range nodes {
		var missing []string
		for _, ref := range inDocker {
			if !have[node][normalizeImage(ref)] {
				missing = append(missing, ref)
			}
		}
		if len(missing) > 0 {
			l.logger.V(1).Infof("%s: loading %s into node %s", kindName, strings.Join(missing, ", "), node)
			want = append(want, image.NodeImages{Node: image.Node{Cluster: kindName, Name: node}, Refs: missing})
		}
	}
	if len(want) == 0 {
		return nil
	}
	// One archive of every image a node lacks and one import per node, the
	// nodes in parallel, as Istio's images are loaded: the images share
	// layers (MetalLB's controller and speaker do), which one `docker save`
	// writes once, and each import costs a `docker exec`. The archive is
	// shared with the other clusters' loads (save).
	return image.LoadArchives(ctx, nodeExec{l.docker}, l.save, want...)
}

// nodeExec runs commands in kind nodes with `docker exec`, for
// image.LoadArchives.
type nodeExec struct{ docker Docker }

func (e nodeExec) Exec(ctx context.Context, _, node string, stdin []byte, argv ...string) error {
	args, in := []string{"exec", node}, io.Reader(nil)
	if stdin != nil {
		args, in = []string{"exec", "-i", node}, bytes.NewReader(stdin)
	}
	_, err := e.docker.Run(ctx, in, append(args, argv...)...)
	return err
}

// normalizeImage spells a docker image reference as containerd stores it:
// meshctl/x:v1 → docker.io/meshctl/x:v1, busybox → docker.io/library/busybox:latest.
func normalizeImage(ref string) string {
	if strings.Contains(ref, "@") {
		return ref
	}
	name, first := ref, ref
	if i := strings.IndexByte(ref, '/'); i >= 0 {
		first = ref[:i]
	}
	switch {
	case !strings.Contains(ref, "/"):
		name = "docker.io/library/" + ref
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		name = "docker.io/" + ref
	}
	if i := strings.LastIndexByte(name, ':'); i < 0 || strings.Contains(name[i:], "/") {
		name += ":latest"
	}
	return name
}
