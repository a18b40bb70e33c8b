package app

import (
	"context"

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
	kubeconfigs := make(map[string]string, len(res.Clusters))
	for _, c := range res.Clusters {
		kubeconfigs[c.Name] = c.Kubeconfig
	}
	authority := meshca.New(meshca.Dir(g.settings.GetString("artifacts"), res.Env), meshca.WithName(res.Env))
	return authority.Install(ctx, kubeconfigs)
}
