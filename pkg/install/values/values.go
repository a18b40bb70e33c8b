package values

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/internal/fsutil"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// profilesFS holds profiles/<profile>.yaml for every profile; default.yaml
// is the base every other profile is layered over.
//
//go:embed profiles/*.yaml
var profilesFS embed.FS

// Defaults of the values meshctl derives.
const (
	DefaultProfile = "default"
	DefaultMeshID  = "mesh1"
	// GatewayService is the east-west gateway every multi-network cluster
	// runs, as Istio's multi-network guide names it; other networks reach a
	// network through it until its address is known.
	GatewayService = "istio-eastwestgateway.istio-system.svc.cluster.local"
	// GatewayPort is the gateway's mTLS (AUTO_PASSTHROUGH) port.
	GatewayPort = 15443
)

// Renderer renders each cluster's Helm values. Build it with New.
type Renderer struct {
	profiles fs.FS
	profile  string
	files    []string
	sets     []string
	meshID   string
	gateways map[string][]string
	// istiods and clusterGateways locate primaries' istiods for their
	// remotes (global.remotePilotAddress), by primary cluster name.
	istiods         map[string]string
	clusterGateways map[string]string
	knownAddresses  bool
}

// Option configures a Renderer.
type Option func(*Renderer)

// WithProfile layers profiles/<name>.yaml over profiles/default.yaml.
func WithProfile(name string) Option { return func(r *Renderer) { r.profile = name } }

// WithFiles adds values files, merged in the order given, as `helm -f`.
func WithFiles(paths ...string) Option {
	return func(r *Renderer) { r.files = append(r.files, paths...) }
}

// WithSet adds --set expressions (Helm's strvals syntax: a.b=1,c={x,y}),
// applied in the order given after every file.
func WithSet(exprs ...string) Option {
	return func(r *Renderer) { r.sets = append(r.sets, exprs...) }
}

// WithMeshID sets global.meshID (default "mesh1"). Empty keeps the default.
func WithMeshID(id string) Option {
	return func(r *Renderer) {
		if id != "" {
			r.meshID = id
		}
	}
}

// WithGatewayAddress records a known address of a network's east-west
// gateway: once a gateway's load balancer (or node) address is known, other
// networks dial it directly instead of resolving the gateway service through
// the registry. Several addresses per network are allowed.
func WithGatewayAddress(network, address string) Option {
	return func(r *Renderer) { r.gateways[network] = append(r.gateways[network], address) }
}

// WithIstiodAddress gives the address a primary's remotes reach its istiod
// at (their global.remotePilotAddress): an IP or a host name. It wins over
// the primary's east-west gateway.
func WithIstiodAddress(primary, address string) Option {
	return func(r *Renderer) { r.istiods[primary] = address }
}

// WithClusterGatewayAddress records the address of one cluster's own
// east-west gateway (what `meshctl up` reports per cluster). A primary's is
// where its remotes reach its istiod, unless WithIstiodAddress says
// otherwise: the gateway exposes istiod's ports as Istio's expose-istiod
// gateway does.
func WithClusterGatewayAddress(cluster, address string) Option {
	return func(r *Renderer) { r.clusterGateways[cluster] = address }
}

// WithKnownAddresses makes Render fail, naming what to pass, rather than
// render a placeholder (UnknownIstiodAddress) for an istiod address it does
// not know: what an installer wants, where `values render` before `up`
// wants the placeholder.
func WithKnownAddresses(b bool) Option { return func(r *Renderer) { r.knownAddresses = b } }

// WithProfiles replaces the embedded profiles (profiles/*.yaml); tests use it.
func WithProfiles(fsys fs.FS) Option { return func(r *Renderer) { r.profiles = fsys } }

// New returns a Renderer. Nothing is read until Render.
func New(opts ...Option) *Renderer {
	r := &Renderer{profiles: profiles(), profile: DefaultProfile, meshID: DefaultMeshID, gateways: map[string][]string{},
		istiods: map[string]string{}, clusterGateways: map[string]string{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Cluster is one cluster's rendered values.
type Cluster struct {
	Name   string
	Role   Role
	Values map[string]any
	// Notes say what in Values is a placeholder and how to fill it in.
	Notes []string
}

// Profiles lists the profiles available, sorted.
func (r *Renderer) Profiles() ([]string, error) {
	matches, err := fs.Glob(r.profiles, "*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing profiles: %w", err)
	}
	var out []string
	for _, m := range matches {
		out = append(out, strings.TrimSuffix(m, ".yaml"))
	}
	sort.Strings(out)
	return out, nil
}

// Render renders the values of the plan's clusters, in plan order; with
// names, only of those clusters (mesh or kind names), in the order given.
// Every input is read and checked before anything is rendered.
func (r *Renderer) Render(p *model.Plan, names ...string) ([]Cluster, error) {
	selected, err := selectClusters(p, names)
	if err != nil {
		return nil, err
	}
	defaults, err := r.loadProfile()
	if err != nil {
		return nil, err
	}
	user, err := r.userValues()
	if err != nil {
		return nil, err
	}
	networks, err := r.meshNetworks(p)
	if err != nil {
		return nil, err
	}
	if err := r.checkAddresses(p); err != nil {
		return nil, err
	}
	var out []Cluster
	var unknown []string
	for _, c := range selected {
		derived := map[string]any{
			"global": map[string]any{
				"meshID":       r.meshID,
				"network":      c.Network,
				"multiCluster": map[string]any{"clusterName": c.Name},
				"meshNetworks": deepCopy(networks),
			},
		}
		role, notes := r.roleValues(p, c)
		derived = coalesce(role, derived)
		// Lowest first: profile, then what the plan says, then the user.
		v := coalesce(derived, deepCopy(defaults).(map[string]any))
		v = coalesce(deepCopy(user).(map[string]any), v)
		g, _ := v["global"].(map[string]any)
		if addr, ok := g["remotePilotAddress"].(string); !ok || addr != UnknownIstiodAddress(c.PrimaryClusterName) {
			notes = nil // the user's values gave the address
		}
		unknown = append(unknown, notes...)
		out = append(out, Cluster{Name: c.Name, Role: RoleOf(p, c), Values: v, Notes: notes})
	}
	if r.knownAddresses && len(unknown) > 0 {
		return nil, unknownAddressError(unknown)
	}
	return out, nil
}

func selectClusters(p *model.Plan, names []string) ([]model.ClusterPlan, error) {
	if len(names) == 0 {
		return p.Clusters, nil
	}
	var out []model.ClusterPlan
	for _, n := range names {
		c, ok := p.Cluster(n)
		if !ok {
			var all []string
			for _, c := range p.Clusters {
				all = append(all, c.Name)
			}
			return nil, fmt.Errorf("unknown cluster %q: the environment's clusters are %s", n, strings.Join(all, ", "))
		}
		out = append(out, c)
	}
	return out, nil
}

// loadProfile reads default.yaml and, for another profile, layers it over.
func (r *Renderer) loadProfile() (map[string]any, error) {
	base, err := r.readProfile(DefaultProfile)
	if err != nil {
		return nil, err
	}
	if r.profile == DefaultProfile || r.profile == "" {
		return base, nil
	}
	over, err := r.readProfile(r.profile)
	if err != nil {
		return nil, err
	}
	return coalesce(over, base), nil
}

func (r *Renderer) readProfile(name string) (map[string]any, error) {
	// A name with a slash or dots would escape the profile directory on a
	// real file system; it is never a profile.
	data, err := fs.ReadFile(r.profiles, name+".yaml")
	if strings.ContainsAny(name, `/\`) || name == "." || name == ".." || errors.Is(err, fs.ErrNotExist) {
		known, lerr := r.Profiles()
		if lerr != nil {
			return nil, lerr
		}
		return nil, fmt.Errorf("unknown profile %q: want one of %s", name, strings.Join(known, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("reading profile %q: %w", name, err)
	}
	m, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", path.Join("values", name+".yaml"), err)
	}
	return m, nil
}

// userValues is Helm's MergeValues: each file over the previous, then each
// --set into the result.
func (r *Renderer) userValues() (map[string]any, error) {
	base := map[string]any{}
	for _, f := range r.files {
		data, err := fsutil.ReadFile(f, fsutil.MaxInputSize)
		if err != nil {
			return nil, fmt.Errorf("reading values file: %w", err)
		}
		m, err := parse(data)
		if err != nil {
			return nil, fmt.Errorf("values file %s: %w", f, err)
		}
		base = mergeMaps(base, m)
	}
	for _, s := range r.sets {
		if err := strvals.ParseInto(s, base); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	return base, nil
}

// parse reads YAML as Helm does (through JSON, so numbers are float64 and
// keys strings). An empty document is an empty map; anything but a map at
// the top is an error, not silently nothing.
func parse(data []byte) (map[string]any, error) {
	m := map[string]any{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("not a YAML map: %w", err)
	}
	return m, nil
}

// meshNetworks is Istio's meshNetworks: every network's clusters as
// registries and, when there is more than one network, how to reach the
// network from the others — its gateway's known addresses, or else the
// east-west gateway service, resolved through the network's registries.
func (r *Renderer) meshNetworks(p *model.Plan) (map[string]any, error) {
	var order []string
	endpoints := map[string][]any{}
	for _, c := range p.Clusters {
		if _, ok := endpoints[c.Network]; !ok {
			order = append(order, c.Network)
		}
		endpoints[c.Network] = append(endpoints[c.Network], map[string]any{"fromRegistry": c.Name})
	}
	out := map[string]any{}
	for _, n := range order {
		nw := map[string]any{"endpoints": endpoints[n]}
		if len(order) > 1 {
			var gws []any
			for _, a := range r.gateways[n] {
				gws = append(gws, map[string]any{"address": a, "port": GatewayPort})
			}
			if len(gws) == 0 {
				gws = append(gws, map[string]any{"registryServiceName": GatewayService, "port": GatewayPort})
			}
			nw["gateways"] = gws
		}
		out[n] = nw
	}
	for n := range r.gateways {
		if _, ok := endpoints[n]; !ok {
			return nil, fmt.Errorf("gateway address for unknown network %q: the networks are %s", n, strings.Join(order, ", "))
		}
	}
	return out, nil
}

// checkAddresses refuses istiod and gateway addresses given for clusters
// the plan does not have, or for clusters no remote uses.
func (r *Renderer) checkAddresses(p *model.Plan) error {
	for name := range r.istiods {
		c, ok := p.Cluster(name)
		if !ok || c.Name != name {
			return fmt.Errorf("istiod address for unknown cluster %q", name)
		}
		if role := RoleOf(p, c); role != RolePrimaryOfRemotes && role != RoleExternal {
			return fmt.Errorf("istiod address for cluster %q, which is no remote's primary (it is a %s)", name, role)
		}
	}
	for name := range r.clusterGateways {
		if c, ok := p.Cluster(name); !ok || c.Name != name {
			return fmt.Errorf("gateway address for unknown cluster %q", name)
		}
	}
	return nil
}

// profiles is the embedded profiles directory, its files at its top as
// WithProfiles' are.
func profiles() fs.FS {
	sub, err := fs.Sub(profilesFS, "profiles")
	if err != nil {
		panic(err) // a constant, valid path: cannot fail
	}
	return sub
}
