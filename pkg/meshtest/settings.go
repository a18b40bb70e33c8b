package meshtest

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// config is everything an environment is made from. Its value comes, in
// order of precedence, from a -meshtest.* flag given on the command line,
// then the MESHTEST_* environment variable, then the suite's Options, then
// the defaults below: the suite says what it needs, a developer or a CI job
// overrides it without editing the suite.
type config struct {
	Topology  string
	Clusters  int
	Networks  int
	Env       string
	Image     string
	Artifacts string
	Reuse     bool
	Keep      bool
	Registry  model.Registry
	EchoImage string
	Wait      time.Duration
	// What `meshctl up` does beyond the clusters.
	RemoteSecrets   bool
	Install         bool
	DataplaneBinary string
	ImageRegistry   string
}

// DefaultEchoImage is the image DeployEcho runs: it needs sh, httpd and nc
// (busybox has all three). Its wget is not used: the static busybox wget of
// meshctl's offline images crashes.
const DefaultEchoImage = "meshctl/busybox:latest"

func defaultConfig() config {
	return config{
		Env:       model.DefaultEnv,
		Artifacts: cluster.DefaultArtifacts,
		Registry:  model.Registry{Enabled: false, Name: model.DefaultRegistryName, Port: model.DefaultRegistryPort, Image: model.DefaultRegistryImage},
		EchoImage: DefaultEchoImage,
		Wait:      cluster.DefaultWait,
		// As `meshctl up`; the install is opt-in because it needs a
		// static meshctl binary, which a test binary is not.
		RemoteSecrets: true,
	}
}

// setting is one knob: its flag is -meshtest.<name>, its environment
// variable MESHTEST_<NAME> (dashes as underscores).
type setting struct {
	name   string
	usage  string
	isBool bool
	apply  func(c *config, v string) error
}

func (s setting) flagName() string { return "meshtest." + s.name }

func (s setting) envName() string {
	return "MESHTEST_" + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}

var settings = []setting{
	{name: "topology", usage: "topology file (Istio's JSON array of clusters, or YAML) the environment must have", apply: func(c *config, v string) error { c.Topology = v; return nil }},
	{name: "clusters", usage: "number of clusters, named cluster1..N, when there is no topology", apply: intSetting(func(c *config) *int { return &c.Clusters })},
	{name: "networks", usage: "spread the clusters round-robin over this many networks (no topology)", apply: intSetting(func(c *config) *int { return &c.Networks })},
	{name: "env", usage: `meshctl environment name: the prefix of the kind clusters ("default" has none)`, apply: func(c *config, v string) error { c.Env = v; return nil }},
	{name: "image", usage: "kind node image of created clusters (default: kind's)", apply: func(c *config, v string) error { c.Image = v; return nil }},
	{name: "artifacts", usage: "directory for kubeconfigs, CA files and failure artifacts (as meshctl --artifacts)", apply: func(c *config, v string) error { c.Artifacts = v; return nil }},
	{name: "reuse", isBool: true, usage: "use the environment `meshctl up` made instead of creating one; fail if it does not match", apply: boolSetting(func(c *config) *bool { return &c.Reuse })},
	{name: "keep", isBool: true, usage: "keep the clusters this run created (rerun with -meshtest.reuse)", apply: boolSetting(func(c *config) *bool { return &c.Keep })},
	{name: "registry", isBool: true, usage: "run a local registry the nodes pull from, as meshctl up does", apply: boolSetting(func(c *config) *bool { return &c.Registry.Enabled })},
	{name: "registry-name", usage: "name of the local registry container", apply: func(c *config, v string) error { c.Registry.Name = v; return nil }},
	{name: "registry-port", usage: "host port of the local registry", apply: intSetting(func(c *config) *int { return &c.Registry.Port })},
	{name: "registry-image", usage: "image of the local registry container", apply: func(c *config, v string) error { c.Registry.Image = v; return nil }},
	{name: "echo-image", usage: "image of DeployEcho's workload (needs sh, httpd, nc)", apply: func(c *config, v string) error { c.EchoImage = v; return nil }},
	{name: "remote-secrets", isBool: true, usage: "install Istio remote secrets, as meshctl up does (default true)", apply: boolSetting(func(c *config) *bool { return &c.RemoteSecrets })},
	{name: "install", isBool: true, usage: "install meshctl's CNI and HBONE dataplane, as meshctl up does", apply: boolSetting(func(c *config) *bool { return &c.Install })},
	{name: "dataplane-binary", usage: "static meshctl binary the dataplane image is built from (default: meshctl on PATH)", apply: func(c *config, v string) error { c.DataplaneBinary = v; return nil }},
	{name: "image-registry", usage: "push the dataplane image to this registry (HOST[:PORT][/PATH]): needed for existing clusters", apply: func(c *config, v string) error { c.ImageRegistry = v; return nil }},
	{name: "wait", usage: "how long to wait for each created control plane to be Ready", apply: func(c *config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("want a duration such as 5m, got %q", v)
		}
		c.Wait = d
		return nil
	}},
}

func intSetting(field func(*config) *int) func(*config, string) error {
	return func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want a whole number, got %q", v)
		}
		if n < 0 {
			return fmt.Errorf("want 0 or more, got %d", n)
		}
		*field(c) = n
		return nil
	}
}

func boolSetting(field func(*config) *bool) func(*config, string) error {
	return func(c *config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*field(c) = b
		return nil
	}
}

// flagValue remembers what was given on the command line; it is applied
// only when the environment is made, above the environment variables.
type flagValue struct {
	s     setting
	value string
	set   bool
}

func (f *flagValue) String() string   { return f.value }
func (f *flagValue) IsBoolFlag() bool { return f.s.isBool }
func (f *flagValue) Set(v string) error {
	// Check now, so that `go test -meshtest.clusters=two` fails while the
	// flags are parsed, the way the flag package reports every bad flag.
	var scratch config
	if err := f.s.apply(&scratch, v); err != nil {
		return err
	}
	f.value, f.set = v, true
	return nil
}

// flagSet holds the values of the -meshtest.* flags of one flag.FlagSet.
type flagSet map[string]*flagValue

func registerFlags(fs *flag.FlagSet) flagSet {
	out := flagSet{}
	for _, s := range settings {
		v := &flagValue{s: s}
		fs.Var(v, s.flagName(), s.usage+" (env "+s.envName()+")")
		out[s.name] = v
	}
	return out
}

// commandLine are the flags `go test ./e2e/... -meshtest.reuse` sets:
// registered on flag.CommandLine when the package is imported, as Ginkgo
// registers its own, so that testing's flag.Parse knows them.
var commandLine = registerFlags(flag.CommandLine)

// resolve layers the environment variables and then the flags over base.
// Every bad value is reported at once, each naming its variable.
func (fs flagSet) resolve(base config, getenv func(string) string) (config, error) {
	c := base
	var errs []string
	for _, s := range settings {
		if v := getenv(s.envName()); v != "" {
			if err := s.apply(&c, v); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", s.envName(), err))
			}
		}
	}
	for _, s := range settings {
		if f := fs[s.name]; f != nil && f.set {
			if err := s.apply(&c, f.value); err != nil {
				errs = append(errs, fmt.Sprintf("-%s: %v", s.flagName(), err))
			}
		}
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("meshtest settings: %s", strings.Join(errs, "; "))
	}
	return c, nil
}

// request is the model.Request the settings describe.
func (c config) request() (model.Request, error) {
	req := model.Request{
		Env:      c.Env,
		Clusters: c.Clusters,
		Networks: c.Networks,
		Image:    c.Image,
		Registry: c.Registry,
	}
	if c.Topology != "" {
		specs, err := model.LoadTopology(c.Topology)
		if err != nil {
			return req, err
		}
		req.Specs = specs
	}
	return req, nil
}
