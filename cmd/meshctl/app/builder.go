package app

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// meshFlags are the flag groups of a command that drives pkg/mesh; a nil
// group is one the command does not have.
type meshFlags struct {
	values   *valuesFlags
	gateways *gatewayFlags
	install  *installFlags
	istio    *istioFlags
}

// meshConfig is the Config of pkg/mesh's verbs, from the command's flag
// groups. Everything is resolved here, before anything changes, so a bad
// combination fails first.
func (g *globals) meshConfig(m meshFlags, opts ...mesh.Option) (*mesh.Config, error) {
	if err := m.istio.validate(m.values); err != nil {
		return nil, err
	}
	all := []mesh.Option{mesh.WithLogger(g.logger), mesh.WithArtifacts(g.opts.Artifacts)}
	if m.values != nil {
		all = append(all, m.values.meshOptions()...)
	}
	if m.gateways != nil {
		gwOpts, err := m.gateways.options(g.logger)
		if err != nil {
			return nil, err
		}
		all = append(all, mesh.WithGatewayOptions(gwOpts...))
	}
	if i := m.install; i != nil {
		all = append(all, mesh.WithInstallTimeout(i.Timeout))
		if i.DataplaneBinary != "" {
			all = append(all, mesh.WithImage(image.WithBinary(i.DataplaneBinary)))
		}
		if i.ImageRegistry != "" {
			all = append(all, mesh.WithImageRegistry(i.ImageRegistry))
		}
	}
	all = append(all, m.istio.meshOptions()...)
	return mesh.NewConfig(g.provider(), append(all, opts...)...), nil
}

// stepHint turns a failed step of pkg/mesh into what the user reruns.
func stepHint(err error) error {
	var se *mesh.StepError
	if !errors.As(err, &se) {
		return err
	}
	rerun := map[string]string{
		mesh.StepConnect:       "meshctl connect",
		mesh.StepGateways:      "meshctl connect",
		mesh.StepRemoteSecrets: "meshctl connect",
		mesh.StepCacerts:       "meshctl up",
		mesh.StepInstall:       "meshctl install",
	}[se.Step]
	if rerun == "" {
		return err
	}
	return fmt.Errorf("%w (rerun `%s`)", err, rerun)
}

// environmentPlan is the plan of an environment that exists: what install
// and uninstall work on.
func (g *globals) environmentPlan(cmd *cobra.Command) (*model.Plan, error) {
	env := g.opts.Env
	cs, err := g.provider().Environment(cmd.Context(), env)
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("environment %q has no clusters (create it with `meshctl up`)", env)
	}
	return &model.Plan{Env: env, Clusters: model.Plans(cs)}, nil
}
