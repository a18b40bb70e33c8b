package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/install/installer"
	"github.com/meshctl/meshctl/pkg/install/values"
)

func newInstallCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install meshctl's CNI and HBONE dataplane into every cluster",
		Long: `Install meshctl's embedded Helm charts into every cluster of the environment,
in parallel: meshctl-cni (install-cni and the node agent, one DaemonSet) and
meshctl-dataplane (the HBONE node proxy DaemonSet and the workload CSR signer).

The dataplane image is built from this meshctl binary (which must be static:
CGO_ENABLED=0, as 'make build' builds it) and side-loaded into every node, so
no registry is needed. Each cluster's values are those 'meshctl values render'
prints for the same flags, checked against the charts' schema before any
cluster is touched.

Each chart is installed, or upgraded, atomically and waited for; a cluster
whose install fails is rolled back and every cluster's outcome is reported.
Re-running with nothing changed changes nothing. 'up' runs install unless
--install=false.`,
		Example: `  meshctl install
  meshctl install --env ci --set global.logging.level=debug -o json
  meshctl install --dataplane-binary _output/bin/meshctl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := g.outputFormat()
			if err != nil {
				return err
			}
			env := g.settings.GetString("env")
			cs, err := g.provider().Environment(cmd.Context(), env)
			if err != nil {
				return err
			}
			if len(cs) == 0 {
				return fmt.Errorf("environment %q has no clusters (create it with `meshctl up`)", env)
			}
			report, err := g.install(cmd, &cluster.Plan{Env: env, Clusters: cs})
			if err != nil {
				return err
			}
			if err := print(g.streams.Out, format, report, func(w io.Writer) error { return printInstall(w, report) }); err != nil {
				return err
			}
			return report.err()
		},
	}
	f := cmd.Flags()
	addValuesFlags(f)
	addInstallFlags(f)
	addOutputFlag(cmd)
	return cmd
}

// addInstallFlags adds the flags of install that up shares.
func addInstallFlags(f *pflag.FlagSet) {
	f.Duration("install-timeout", installer.DefaultTimeout, "how long each chart's install or upgrade may take, waiting for its Pods included")
	f.String("dataplane-binary", "", "static Linux meshctl binary to build the dataplane image from (default: this one)")
}

// installReport is what install prints.
type installReport struct {
	Env      string                    `json:"env"`
	Image    string                    `json:"image"`
	ImageID  string                    `json:"imageID"`
	Clusters []installer.ClusterResult `json:"clusters"`
}

// err is the command's error once the report is printed: which clusters
// failed.
func (r *installReport) err() error {
	return failedClusters("install", &installer.Result{Clusters: r.Clusters})
}

// install is `meshctl install` on the plan's clusters: values, image, side
// load, charts. Input is checked in full before anything is changed; the
// error is about input, per-cluster failures are in the report.
func (g *globals) install(cmd *cobra.Command, plan *cluster.Plan, gateways ...gateway.ClusterResult) (*installReport, error) {
	ctx := cmd.Context()
	p := g.provider()
	vopts, err := g.valuesOptions(cmd)
	if err != nil {
		return nil, err
	}
	vopts = append(vopts, discoveredGateways(cmd, gateways)...)
	rendered, err := values.New(vopts...).Render(plan)
	if err != nil {
		return nil, err
	}
	var iopts []image.Option
	if b := g.settings.GetString("dataplane-binary"); b != "" {
		iopts = append(iopts, image.WithBinary(b))
	}
	img, err := image.New(iopts...)
	if err != nil {
		return nil, err
	}
	id, err := img.ID()
	if err != nil {
		return nil, err
	}
	targets := make([]installer.Target, len(rendered))
	for n, r := range rendered {
		c, _ := plan.Cluster(r.Name)
		v := r.Values
		// What meshctl knows goes under what the user set.
		fillDefaults(v, "image", map[string]any{"repository": img.Repository(), "tag": img.TagName(), "id": id})
		fillDefaults(v, "proxy", map[string]any{"meshCIDRs": meshCIDRs(plan, c)})
		targets[n] = installer.Target{Cluster: c.Name, Kubeconfig: p.KubeconfigPath(plan.Env, c.Name, false), Values: v}
	}
	in := installer.New(installer.WithTimeout(g.settings.GetDuration("install-timeout")))
	if err := in.Validate(targets...); err != nil {
		return nil, err
	}
	if err := requireCacerts(ctx, targets); err != nil {
		return nil, err
	}
	if err := g.loadImage(ctx, p, plan, img); err != nil {
		return nil, err
	}
	status := cli.NewStatus(g.logger)
	status.Start(fmt.Sprintf("Installing %s into %d cluster(s)", strings.Join(chartNames(), " and "), len(targets)))
	res, err := in.Install(ctx, targets...)
	status.End(err == nil && !res.Failed())
	if err != nil {
		return nil, err
	}
	return &installReport{Env: plan.Env, Image: img.Ref(), ImageID: id, Clusters: res.Clusters}, nil
}

func chartNames() []string { return []string{"meshctl-cni", "meshctl-dataplane"} }

// fillDefaults sets v[key][k] for every k the user's values left unset.
func fillDefaults(v map[string]any, key string, defaults map[string]any) {
	m, ok := v[key].(map[string]any)
	if !ok {
		m = map[string]any{}
		v[key] = m
	}
	for k, d := range defaults {
		if _, set := m[k]; !set {
			m[k] = d
		}
	}
}

// meshCIDRs are the pod subnets the proxy reaches directly over HBONE: its
// own cluster's and those of the clusters on its network (connect routes
// them). Other networks are reached through their east-west gateway.
func meshCIDRs(plan *cluster.Plan, c cluster.ClusterPlan) []any {
	var out []any
	for _, o := range plan.Clusters {
		if o.Network == c.Network {
			for _, s := range o.PodSubnets {
				out = append(out, s)
			}
		}
	}
	return out
}

// requireCacerts: the signer signs with the cluster's intermediate CA; without
// its Secret the signer never starts and the install would only time out.
func requireCacerts(ctx context.Context, targets []installer.Target) error {
	var errs []error
	for _, t := range targets {
		secret := "cacerts"
		if s, ok := t.Values["signer"].(map[string]any); ok {
			if n, ok := s["cacertsSecret"].(string); ok && n != "" {
				secret = n
			}
		}
		ns := installer.Namespace(t.Values)
		cfg, err := clientcmd.BuildConfigFromFlags("", t.Kubeconfig)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %q: kubeconfig: %w", t.Cluster, err))
			continue
		}
		cfg.Timeout = 15 * time.Second
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %q: %w", t.Cluster, err))
			continue
		}
		_, err = cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("cluster %q has no Secret %s/%s, the intermediate CA the signer signs with: run `meshctl up` (it installs it unless --cacerts=false)", t.Cluster, ns, secret))
		case err != nil:
			errs = append(errs, fmt.Errorf("cluster %q is unreachable at %s: %w", t.Cluster, cfg.Host, err))
		}
	}
	return errors.Join(errs...)
}

// loadImage side-loads the image into every node of every cluster.
func (g *globals) loadImage(ctx context.Context, p *cluster.Provider, plan *cluster.Plan, img *image.Image) error {
	st, err := p.Status(ctx, plan.Env, "")
	if err != nil {
		return err
	}
	var nodes []image.Node
	for _, c := range st.Clusters {
		pc, ok := plan.Cluster(c.Name)
		if !ok {
			continue
		}
		if pc.Existing {
			// Its nodes are not containers on this machine: they pull the
			// image like any other, from a registry the user pushed it to.
			g.logger.Warnf("cluster %q is an existing cluster: its nodes cannot be side-loaded; push %s to a registry they pull from and set image.repository / image.tag", c.Name, img.Ref())
			continue
		}
		if c.Error != "" {
			return fmt.Errorf("cluster %q: listing nodes: %s", c.Name, c.Error)
		}
		for _, n := range c.Nodes {
			nodes = append(nodes, image.Node{Cluster: c.KindName, Name: n.Name})
		}
	}
	status := cli.NewStatus(g.logger)
	status.Start(fmt.Sprintf("Loading %s into %d node(s)", img.Ref(), len(nodes)))
	err = img.Load(ctx, p, nodes...)
	status.End(err == nil)
	return err
}

func printInstall(w io.Writer, r *installReport) error {
	fmt.Fprintf(w, "Dataplane image %s (%s)\n", r.Image, r.ImageID)
	return printReleases(w, &installer.Result{Clusters: r.Clusters})
}

func printReleases(w io.Writer, res *installer.Result) error {
	t := newTable(w, "CLUSTER", "NAMESPACE", "RELEASE", "CHART", "ACTION", "REVISION")
	var errs []string
	for _, c := range res.Clusters {
		if len(c.Releases) == 0 {
			t.row(c.Cluster, c.Namespace, "-", "-", installer.ActionFailed, "-")
		}
		for _, r := range c.Releases {
			rev := "-"
			if r.Revision > 0 {
				rev = strconv.Itoa(r.Revision)
			}
			t.row(c.Cluster, c.Namespace, r.Name, r.Chart, r.Action, rev)
		}
		if c.Error != "" {
			errs = append(errs, fmt.Sprintf("%s: %s", c.Cluster, c.Error))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, e := range errs {
		fmt.Fprintf(w, "\n%s\n", e)
	}
	return nil
}

// failedClusters turns a result with failed clusters into the command's
// error, after the result has been printed.
func failedClusters(what string, res *installer.Result) error {
	var failed []string
	for _, c := range res.Clusters {
		if c.Error != "" {
			failed = append(failed, c.Cluster)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%s failed in cluster(s) %s (see above)", what, strings.Join(failed, ", "))
}

func newUninstallCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove meshctl's CNI and HBONE dataplane from every cluster",
		Long: `Uninstall meshctl's charts from every cluster of the environment, in
parallel, the dataplane before the CNI. install-cni takes meshctl-cni out of
each node's CNI config as its Pods stop. Charts that are not installed are
reported, not an error. The cacerts Secret and the namespace stay.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := g.outputFormat()
			if err != nil {
				return err
			}
			env := g.settings.GetString("env")
			p := g.provider()
			cs, err := p.Environment(cmd.Context(), env)
			if err != nil {
				return err
			}
			if len(cs) == 0 {
				return fmt.Errorf("environment %q has no clusters", env)
			}
			res, err := g.uninstallCharts(cmd.Context(), env, cs, g.settings.GetString("namespace"))
			if err != nil {
				return err
			}
			if err := print(g.streams.Out, format, res, func(w io.Writer) error { return printReleases(w, res) }); err != nil {
				return err
			}
			return failedClusters("uninstall", res)
		},
	}
	f := cmd.Flags()
	f.String("namespace", installer.DefaultNamespace, "namespace the charts were installed in (global.istioNamespace)")
	f.Duration("install-timeout", installer.DefaultTimeout, "how long each chart's uninstall may take")
	addOutputFlag(cmd)
	return cmd
}

// uninstallCharts removes meshctl's releases from the clusters cs of env, in
// parallel, as one status step; uninstall and down both use it.
func (g *globals) uninstallCharts(ctx context.Context, env string, cs []cluster.ClusterPlan, ns string) (*installer.Result, error) {
	p := g.provider()
	var targets []installer.Target
	for _, c := range cs {
		targets = append(targets, installer.Target{Cluster: c.Name, Kubeconfig: p.KubeconfigPath(env, c.Name, false),
			Values: map[string]any{"global": map[string]any{"istioNamespace": ns}}})
	}
	status := cli.NewStatus(g.logger)
	status.Start(fmt.Sprintf("Uninstalling meshctl's charts from %d cluster(s)", len(targets)))
	res, err := installer.New(installer.WithTimeout(g.settings.GetDuration("install-timeout"))).Uninstall(ctx, targets...)
	status.End(err == nil && !res.Failed())
	return res, err
}

// discoveredGateways turns the east-west gateway addresses that connect just
// reported into values options, so meshNetworks names real addresses — for
// every network the user did not give with --gateway-address (theirs win).
func discoveredGateways(cmd *cobra.Command, gws []gateway.ClusterResult) []values.Option {
	given := map[string]bool{}
	if f := cmd.Flags().Lookup("gateway-address"); f != nil && f.Changed {
		vs, _ := cmd.Flags().GetStringArray("gateway-address")
		for _, v := range vs {
			network, _, _ := strings.Cut(v, "=")
			given[network] = true
		}
	}
	var opts []values.Option
	for network, addrs := range (&gateway.Result{Clusters: gws}).GatewayAddresses() {
		if given[network] {
			continue
		}
		for _, a := range addrs {
			opts = append(opts, values.WithGatewayAddress(network, a))
		}
	}
	return opts
}
