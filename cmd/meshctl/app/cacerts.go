package app

import (
	"context"
	"fmt"

	"github.com/meshctl/meshctl/internal/parallel"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/install/meshca"
)

// installCacerts gives every cluster of an up its intermediate of the
// environment's shared root CA, as the istio-system/cacerts Secret: files
// are created or reused as `meshctl ca` does, then installed concurrently.
func (g *globals) installCacerts(ctx context.Context, res *cluster.UpResult) error {
	status := cli.NewStatus(g.logger)
	status.Start("Installing the shared root CA (istio-system/cacerts)")
	err := g.doInstallCacerts(ctx, res)
	status.End(err == nil)
	return err
}

func (g *globals) doInstallCacerts(ctx context.Context, res *cluster.UpResult) error {
	names := make([]string, len(res.Clusters))
	for i, c := range res.Clusters {
		names[i] = c.Name
	}
	authority := meshca.New(meshca.Dir(g.settings.GetString("artifacts"), res.Env), meshca.WithName(res.Env))
	if _, err := authority.Ensure(names...); err != nil {
		return err
	}
	return parallel.ForEach(res.Clusters, func(c cluster.ClusterResult) error {
		return installCacertsIn(ctx, authority, c)
	})
}

func installCacertsIn(ctx context.Context, authority *meshca.Authority, c cluster.ClusterResult) error {
	certs, err := authority.Cacerts(c.Name)
	if err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	if _, err := meshca.InstallSecret(ctx, cs, certs); err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return nil
}
