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

	"sigs.k8s.io/kind/pkg/log"
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
	for _, image := range images {
		if _, err := l.docker.Run(ctx, nil, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
			l.logger.V(1).Infof("%s: image %s is not in the docker engine; the nodes will pull it", kindName, image)
			continue
		}
		inDocker = append(inDocker, image)
	}
	// One archive of every image a node lacks and one import per node: the
	// images share layers (MetalLB's controller and speaker do), which one
	// `docker save` writes once, and each import costs a `docker exec`.
	archives := map[string]string{} // images, joined -> archive holding them
	var dir string                  // the archives', made on first need
	defer func() {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}()
	for _, node := range nodes {
		var missing []string
		for _, image := range inDocker {
			if !have[node][normalizeImage(image)] {
				missing = append(missing, image)
			}
		}
		if len(missing) == 0 {
			continue
		}
		key := strings.Join(missing, " ")
		archive, ok := archives[key]
		if !ok {
			if dir == "" {
				var err error
				if dir, err = os.MkdirTemp("", "meshctl-image-"); err != nil {
					return err
				}
			}
			archive = filepath.Join(dir, fmt.Sprintf("images-%d.tar", len(archives)))
			if _, err := l.docker.Run(ctx, nil, append([]string{"save", "-o", archive}, missing...)...); err != nil {
				return err
			}
			archives[key] = archive
		}
		l.logger.V(1).Infof("%s: loading %s into node %s", kindName, strings.Join(missing, ", "), node)
		f, err := os.Open(archive)
		if err != nil {
			return err
		}
		_, err = l.docker.Run(ctx, f, "exec", "-i", node, "ctr", "--namespace=k8s.io", "images", "import", "--all-platforms", "--digests", "-")
		f.Close()
		if err != nil {
			return fmt.Errorf("loading %s into node %s: %w", strings.Join(missing, ", "), node, err)
		}
	}
	return nil
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
