package values

import (
	"fmt"
	"strings"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// Role is the part a cluster plays in Istio's multicluster models, which
// decides how Istio's charts are installed there.
type Role string

// Istio's roles, as its multicluster install guides and its test framework
// (pkg/test/framework/components/istio) install them.
const (
	// RolePrimary runs istiod for itself and reads its own config.
	RolePrimary Role = "primary"
	// RolePrimaryOfRemotes is a primary that other clusters (remotes) use
	// as their control plane: istiod runs with EXTERNAL_ISTIOD, so that
	// it writes to the remotes too (their istio-ca-root-cert, say).
	RolePrimaryOfRemotes Role = "primary-of-remotes"
	// RoleExternal runs istiod for other clusters and reads its config
	// from another cluster (its configClusterName): Istio's external
	// control plane.
	RoleExternal Role = "external-control-plane"
	// RoleConfig holds the mesh config an external control plane reads,
	// and runs workloads; istiod is installed with the remote profile.
	RoleConfig Role = "config"
	// RoleRemote runs workloads only; its control plane is its primary's.
	RoleRemote Role = "remote"
)

// RoleOf is c's role in p.
func RoleOf(p *model.Plan, c model.ClusterPlan) Role {
	switch {
	case c.PrimaryClusterName != c.Name && c.ConfigClusterName == c.Name:
		return RoleConfig
	case c.PrimaryClusterName != c.Name:
		return RoleRemote
	case c.ConfigClusterName != c.Name:
		return RoleExternal
	}
	for _, o := range p.Clusters {
		if o.Name != c.Name && o.PrimaryClusterName == c.Name {
			return RolePrimaryOfRemotes
		}
	}
	return RolePrimary
}

// Install phases, in the order InstallOrder gives them.
const (
	// PhaseConfig: config clusters get Istio's CRDs and remote-profile
	// istiod first, because the external control plane reads its config
	// from them.
	PhaseConfig = "config"
	// PhasePrimaries: every cluster that runs istiod.
	PhasePrimaries = "primaries"
	// PhaseRemoteSecrets: the remote secrets, into the clusters listed
	// (those that run istiod), once istiod can read them.
	PhaseRemoteSecrets = "remote-secrets"
	// PhaseRemotes: the remotes, whose injection webhook and istiod
	// Service point at a primary that must be serving by then.
	PhaseRemotes = "remotes"
)

// Phase is one step of installing Istio on an environment: its clusters can
// be installed in parallel, after every earlier phase has finished.
type Phase struct {
	Name     string   `json:"name"`
	Clusters []string `json:"clusters"`
}

// InstallOrder is the order Istio's charts go into the plan's clusters, as
// Istio's guides and test framework install them: config clusters, then the
// clusters that run istiod, then remote secrets into those, then remotes.
// Empty phases are left out.
func InstallOrder(p *model.Plan) []Phase {
	var cfg, prim, rem []string
	for _, c := range p.Clusters {
		switch RoleOf(p, c) {
		case RoleConfig:
			cfg = append(cfg, c.Name)
		case RoleRemote:
			rem = append(rem, c.Name)
		default:
			prim = append(prim, c.Name)
		}
	}
	var out []Phase
	for _, ph := range []Phase{{PhaseConfig, cfg}, {PhasePrimaries, prim}, {PhaseRemoteSecrets, prim}, {PhaseRemotes, rem}} {
		if len(ph.Clusters) > 0 && (ph.Name != PhaseRemoteSecrets || len(p.Clusters) > 1) {
			out = append(out, ph)
		}
	}
	return out
}

// UnknownIstiodAddress is the placeholder global.remotePilotAddress of a
// cluster whose primary's istiod address is not known yet: before `meshctl
// up` has exposed the primary's istiod (pkg/connect/gateway's
// istiod-remotes Service), with no --istiod-address for it. Istio's charts would make an ExternalName Service of it, which the
// API server refuses, so an install with it fails rather than half-works.
func UnknownIstiodAddress(primary string) string {
	return "UNKNOWN-istiod-address-of-" + primary
}

// istiodAddress is where c's remotes reach primary's istiod: the address
// given for it (by the user, or by `meshctl up` from the Service exposing
// it), else primary's own east-west gateway.
func (r *Renderer) istiodAddress(primary string) (string, bool) {
	if a, ok := r.istiods[primary]; ok {
		return a, true
	}
	if a, ok := r.clusterGateways[primary]; ok {
		return a, true
	}
	return UnknownIstiodAddress(primary), false
}

// injectionPath is the path of istiod's injection webhook for pods of
// cluster c, as Istio's primary-remote guide sets istiodRemote.injectionPath:
// istiod injects them with c's cluster ID and network.
func injectionPath(c model.ClusterPlan) string {
	return fmt.Sprintf("/inject/cluster/%s/net/%s", c.Name, c.Network)
}

// roleValues are the values c's role adds, and a note when something in
// them is a placeholder.
func (r *Renderer) roleValues(p *model.Plan, c model.ClusterPlan) (map[string]any, []string) {
	role := RoleOf(p, c)
	global := map[string]any{}
	out := map[string]any{"global": global}
	var notes []string
	remote := func() {
		addr, known := r.istiodAddress(c.PrimaryClusterName)
		if !known {
			notes = append(notes, fmt.Sprintf("cluster %q: global.remotePilotAddress is a placeholder: the address of %q's istiod is not known until `meshctl up` exposes it (the %s/%s Service); pass --istiod-address %s=ADDRESS",
				c.Name, c.PrimaryClusterName, gatewayNamespace, istiodServiceName, c.PrimaryClusterName))
		}
		out["profile"] = "remote"
		global["remotePilotAddress"] = addr
		out["istiodRemote"] = map[string]any{"injectionPath": injectionPath(c)}
	}
	switch role {
	case RolePrimaryOfRemotes:
		global["externalIstiod"] = true
	case RoleExternal:
		// Istio's external-istiod test defaults
		// (iop-externalistiod-primary-integration-test-defaults.yaml) as
		// Helm values: istiod is the config cluster's, by cluster ID too.
		global["externalIstiod"] = true
		global["operatorManageWebhooks"] = true
		global["configValidation"] = false
		global["multiCluster"] = map[string]any{"clusterName": c.ConfigClusterName}
		out["env"] = map[string]any{
			"INJECTION_WEBHOOK_CONFIG_NAME":  "istio-sidecar-injector-istio-system",
			"VALIDATION_WEBHOOK_CONFIG_NAME": "istio-istio-system",
			"EXTERNAL_ISTIOD":                "true",
			"SHARED_MESH_CONFIG":             "istio",
		}
	case RoleConfig:
		remote()
		global["externalIstiod"] = true
		global["configCluster"] = true
		out["configMap"] = true
		out["telemetry"] = map[string]any{"enabled": true}
	case RoleRemote:
		remote()
		if prim, ok := p.Cluster(c.PrimaryClusterName); ok && RoleOf(p, prim) == RoleExternal {
			global["externalIstiod"] = true
		}
	}
	return out, notes
}

// unknownAddressError is Render's error under WithKnownAddresses when a
// placeholder would be rendered.
func unknownAddressError(notes []string) error {
	return fmt.Errorf("istiod addresses unknown:\n  - %s", strings.Join(notes, "\n  - "))
}

// Where `meshctl up` exposes a primary's istiod (pkg/connect/gateway, which
// imports this package's callers, not the other way round).
const (
	gatewayNamespace  = "istio-system"
	istiodServiceName = "istiod-remotes"
)
