package app

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// builder is pkg/mesh's Builder configured from the command's flags: the
// values flags, the gateway flags, the image and install flags — each only
// where the command has it. Flags are read here, before anything changes,
// so a bad combination fails first.
func (g *globals) builder(cmd *cobra.Command, opts ...mesh.Option) (*mesh.Builder, error) {
	s := g.settings
	has := func(name string) bool { return cmd.Flags().Lookup(name) != nil }
	all := []mesh.Option{mesh.WithLogger(g.logger), mesh.WithArtifacts(s.GetString("artifacts"))}
	if has("values") {
		vopts, err := g.valuesOptions(cmd)
		if err != nil {
			return nil, err
		}
		all = append(all, mesh.WithValues(vopts...))
		// Given addresses are also told to the builder as such, so the
		// gateways connect discovers never override them.
		for _, gw := range g.stringArray(cmd, "gateway-address") {
			network, addr, _ := strings.Cut(gw, "=")
			all = append(all, mesh.WithGatewayAddress(network, addr))
		}
	}
	if has("gateway-timeout") {
		gwOpts, err := g.gatewayOptions()
		if err != nil {
			return nil, err
		}
		all = append(all, mesh.WithGatewayOptions(gwOpts...))
	}
	if has("install-timeout") {
		all = append(all, mesh.WithInstallTimeout(s.GetDuration("install-timeout")))
	}
	if has("dataplane-binary") {
		if b := s.GetString("dataplane-binary"); b != "" {
			all = append(all, mesh.WithImage(image.WithBinary(b)))
		}
		if r := s.GetString("image-registry"); r != "" {
			all = append(all, mesh.WithImageRegistry(r))
		}
	}
	if has("istio") {
		all = append(all, g.istioOptions()...)
	}
	return mesh.New(g.provider(), append(all, opts...)...), nil
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
func (g *globals) environmentPlan(cmd *cobra.Command) (*cluster.Plan, error) {
	env := g.settings.GetString("env")
	cs, err := g.provider().Environment(cmd.Context(), env)
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("environment %q has no clusters (create it with `meshctl up`)", env)
	}
	return &cluster.Plan{Env: env, Clusters: cs}, nil
}
