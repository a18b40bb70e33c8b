// Package registry runs the local image registry an environment's kind
// clusters pull from, and points the clusters' nodes at it, as kind's
// local-registry guide does.
package registry

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster/internal/kindprovider"
	"github.com/meshctl/meshctl/pkg/cluster/model"

	"sigs.k8s.io/kind/pkg/cluster/nodes"
)

// Docker runs docker CLI commands.
type Docker interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// What Ensure did: the words `up` reports (cluster.ActionReused and
// cluster.ActionCreated are the same).
const (
	Reused  = "reused"
	Started = "started"
	Created = "created"
)

// Ensure starts the local registry container, or reuses it. It is bound to
// localhost only: nothing outside this machine should push to it.
func Ensure(ctx context.Context, d Docker, r model.Registry) (string, error) {
	out, err := d.Run(ctx, "inspect", "--format", "{{.State.Running}}", r.Name)
	if err == nil {
		if strings.TrimSpace(string(out)) == "true" {
			return Reused, nil
		}
		if _, err := d.Run(ctx, "start", r.Name); err != nil {
			return "", fmt.Errorf("starting stopped registry %s: %w", r.Name, err)
		}
		return Started, nil
	}
	_, err = d.Run(ctx, "run", "--detach", "--restart=always",
		"--publish", fmt.Sprintf("127.0.0.1:%d:5000", r.Port),
		"--network", "bridge", "--name", r.Name,
		"--label", "meshctl.dev/registry=true", r.Image)
	if err != nil {
		return "", fmt.Errorf("starting registry %s from image %s: %w (without a reachable registry, build an image with `make e2e-env` and pass --registry-image, or use --registry=false)", r.Name, r.Image, err)
	}
	return Created, nil
}

// Configure makes a kind cluster's nodes (listNodes lists them) pull
// localhost:PORT/* from the registry container over the docker network,
// and advertises it in the local-registry-hosting ConfigMap (KEP-1755), as
// kind's guide does.
func Configure(ctx context.Context, d Docker, network string, r model.Registry, c model.ClusterPlan, listNodes func(kindName string) ([]nodes.Node, error)) error {
	// Connecting twice fails with "already exists"; that is the state we want.
	if _, err := d.Run(ctx, "network", "connect", network, r.Name); err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("connecting registry %s to network %s: %w", r.Name, network, err)
	}
	ns, err := listNodes(c.KindName)
	if err != nil {
		return fmt.Errorf("cluster %q: listing nodes: %w", c.Name, err)
	}
	dir := fmt.Sprintf("%s/localhost:%d", model.RegistryCertsDir, r.Port)
	hosts := fmt.Sprintf("[host.\"http://%s:5000\"]\n", r.Name)
	err = parallel.ForEach(ns, func(n nodes.Node) error {
		cmd := n.Command("sh", "-c", fmt.Sprintf("mkdir -p '%s' && cat > '%s/hosts.toml'", dir, dir))
		cmd.SetStdin(strings.NewReader(hosts))
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("cluster %q: node %s: writing registry hosts.toml: %w", c.Name, n, kindprovider.RunErr(err))
		}
		return nil
	})
	if err != nil {
		return err
	}
	cp, err := kindprovider.ControlPlane(ns)
	if err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	cmd := cp.Command("kubectl", "--kubeconfig=/etc/kubernetes/admin.conf", "apply", "-f", "-")
	cmd.SetStdin(bytes.NewReader(registryConfigMap(r)))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cluster %q: applying local-registry-hosting ConfigMap: %w", c.Name, kindprovider.RunErr(err))
	}
	return nil
}

func registryConfigMap(r model.Registry) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: ConfigMap
metadata:
  name: local-registry-hosting
  namespace: kube-public
data:
  localRegistryHosting.v1: |
    host: "localhost:%d"
    hostFromContainerRuntime: "%s:5000"
    hostFromClusterNetwork: "%s:5000"
    help: "https://kind.sigs.k8s.io/docs/user/local-registry/"
`, r.Port, r.Name, r.Name)
}
