package mesh

import (
	"context"
	"fmt"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/install/installer"
)

// Up creates (or reuses) an environment's clusters and runs every step the
// Config leaves on: connect, the shared root CA, the install.
type Up struct{ cfg *Config }

// NewUp returns the Up verb.
func NewUp(cfg *Config) *Up { return &Up{cfg: cfg} }

// Run brings plan up. What the install would refuse (bad values, an image
// no cluster could get) is refused before any cluster is created. The
// result holds what was done even when a step fails (a *StepError).
func (u *Up) Run(ctx context.Context, plan *model.Plan) (*Result, error) {
	return u.cfg.up(ctx, plan)
}

// Connect routes the clusters of each network to each other, gives the
// clusters of a multi-network environment MetalLB and east-west gateways,
// and installs the remote secrets (unless WithRemoteSecrets(false)).
type Connect struct{ cfg *Config }

// NewConnect returns the Connect verb.
func NewConnect(cfg *Config) *Connect { return &Connect{cfg: cfg} }

// Run connects the clusters of env.
func (c *Connect) Run(ctx context.Context, env string) (*ConnectResult, error) {
	return c.cfg.connect(ctx, env)
}

// Install installs meshctl's charts (and with WithIstio Istio's) into every
// cluster of a plan; see Run.
type Install struct{ cfg *Config }

// NewInstall returns the Install verb.
func NewInstall(cfg *Config) *Install { return &Install{cfg: cfg} }

// Run installs into every cluster of plan, in parallel: values (with the
// east-west gateway addresses connect found), the image (side-loaded into
// kind nodes, pushed with WithImageRegistry), then the charts. Input is
// checked in full before anything is changed: the error is about input or
// reachability, per-cluster failures are in the report (see
// InstallReport.Failed).
func (i *Install) Run(ctx context.Context, plan *model.Plan, gateways ...gateway.ClusterResult) (*InstallReport, error) {
	return i.cfg.install(ctx, plan, gateways...)
}

// Validate checks what Run would install into plan's clusters without
// touching any of them.
func (i *Install) Validate(plan *model.Plan) error { return i.cfg.validateInstall(plan) }

// Uninstall removes meshctl's releases (and Istio's, where there are any)
// from clusters of an environment.
type Uninstall struct {
	cfg *Config
	// Namespace is where the charts were installed (global.istioNamespace).
	Namespace string
}

// NewUninstall returns the Uninstall verb, for the default namespace.
func NewUninstall(cfg *Config) *Uninstall {
	return &Uninstall{cfg: cfg, Namespace: installer.DefaultNamespace}
}

// Run removes the releases from the clusters cs of env, in parallel, the
// dataplane before the CNI; then the dataplane image Install side-loaded,
// from the nodes of the kind clusters whose releases are gone (failures
// there are warnings). Per-cluster failures are in the result.
func (u *Uninstall) Run(ctx context.Context, env string, cs []model.ClusterPlan) (*installer.Result, error) {
	return u.cfg.uninstall(ctx, env, cs, u.Namespace)
}

// Down tears an environment down as `meshctl down` does: meshctl's Helm
// releases are removed from the clusters it keeps — existing clusters, and
// with UninstallOnly every cluster — then the provider deletes the kind
// clusters and removes what meshctl labelled from the kept ones.
type Down struct {
	cfg *Config
	// Registry, when not empty, is the local registry container to delete
	// too.
	Registry string
	// Clusters are kind clusters to delete even without meshctl's record.
	Clusters []string
	// UninstallOnly keeps the kind clusters too.
	UninstallOnly bool
}

// NewDown returns the Down verb.
func NewDown(cfg *Config) *Down { return &Down{cfg: cfg} }

// Run tears env down. The Helm step comes first: Helm's objects are
// labelled managed-by=Helm, and deleting meshctl's labelled objects behind
// Helm's back would leave releases that lie.
func (d *Down) Run(ctx context.Context, env string) (*cluster.DownResult, error) {
	if err := d.uninstallKept(ctx, env); err != nil {
		return nil, err
	}
	var opts []cluster.DownOption
	if d.Registry != "" {
		opts = append(opts, cluster.DownWithRegistry(d.Registry))
	}
	opts = append(opts, cluster.DownWithClusters(d.Clusters...), cluster.DownWithUninstallOnly(d.UninstallOnly))
	return d.cfg.p.Down(ctx, env, opts...)
}

func (d *Down) uninstallKept(ctx context.Context, env string) error {
	cs, err := d.cfg.p.Environment(ctx, env)
	if err != nil {
		return err
	}
	var kept []model.ClusterPlan
	for _, c := range cs {
		if c.Existing || d.UninstallOnly {
			kept = append(kept, c.ClusterPlan)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	res, err := NewUninstall(d.cfg).Run(ctx, env, kept)
	if err != nil {
		return fmt.Errorf("uninstalling meshctl's charts: %w", err)
	}
	return res.Err("uninstall")
}

// Status reads an environment: its clusters, nodes, networks and subnets.
type Status struct {
	cfg *Config
	// Registry is the local registry container to report on.
	Registry string
}

// NewStatus returns the Status verb, for the default registry.
func NewStatus(cfg *Config) *Status {
	return &Status{cfg: cfg, Registry: model.DefaultRegistryName}
}

// Run reads env: each cluster's health and, unless the Config says
// WithRemoteSecrets(false), the remote secrets it holds, which make it
// unready when one is missing or names an API server other than the one
// `up` would write now (the environment is then Degraded). A cluster that
// cannot be read is reported, not an error.
func (s *Status) Run(ctx context.Context, env string) (*cluster.StatusResult, error) {
	return s.cfg.status(ctx, env, s.Registry)
}
