package app

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/install/installer"
	"github.com/meshctl/meshctl/pkg/mesh"
)

// installOptions are install's flags.
type installOptions struct {
	values  valuesFlags
	install installFlags
	istio   istioFlags
	Output  string
}

func newInstallCommand(g *globals) *cobra.Command {
	o := &installOptions{}
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
--install=false.

Existing clusters (a topology entry with meta.kubeconfig) have nodes that are
not containers on this machine: with --image-registry the image is pushed
there and every cluster runs it under that name (kind nodes still get it
side-loaded, so they never pull); without it, install refuses them before
changing anything, unless image.repository is set in the values.

With --istio, Istio's own control plane follows: Istio's base and istiod
charts (releases istio-base and istiod) from --istio-charts (default: the
istio.io/istio module download of the version meshctl is tested with), each
cluster with exactly the values 'meshctl values render' gives it, images from
--istio-hub/--istio-tag (default: the offline build of make e2e-env,
side-loaded into kind nodes from the host's Docker). Clusters that run their
own control plane go first, in parallel, then the remotes.

With --istio --istio-ambient, Istio is installed in ambient mode instead of
meshctl's charts: the values get the ambient profile (as --profile ambient),
and Istio's istio-cni (release istio-cni, image install-cni of --istio-hub and
--istio-tag) and ztunnel (release ztunnel) charts follow istiod; ztunnel's
chart runs meshctl's dataplane image, built from meshctl-dataplane, so
meshctl's proxy stands as ztunnel under every name Istio's tools look for,
with certificates and configuration from istiod.`,
		Example: `  meshctl install
  meshctl install --env ci --set global.logging.level=debug -o json
  meshctl install --dataplane-binary _output/bin/meshctl
  meshctl install --image-registry registry.example.com:5000/mesh
  meshctl install --istio
  meshctl install --istio --istio-hub docker.io/istio --istio-tag 1.29.0
  meshctl install --istio --istio-ambient`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The flags first: a bad combination fails before any cluster is read.
			cfg, err := g.meshConfig(meshFlags{values: &o.values, install: &o.install, istio: &o.istio})
			if err != nil {
				return err
			}
			plan, err := g.environmentPlan(cmd)
			if err != nil {
				return err
			}
			report, err := mesh.NewInstall(cfg).Run(cmd.Context(), plan)
			if err != nil {
				return err
			}
			if err := print(g.streams.Out, o.Output, report, func(w io.Writer) error { return printInstall(w, report) }); err != nil {
				return err
			}
			return report.Err()
		},
	}
	f := flags{cmd.Flags()}
	o.values.addFlags(f)
	o.install.addFlags(f)
	o.istio.addFlags(f)
	addOutputFlag(f, &o.Output)
	return cmd
}

// installFlags are the flags of install that up shares; down and uninstall
// have the timeout alone.
type installFlags struct {
	Timeout         time.Duration
	DataplaneBinary string
	ImageRegistry   string
}

func (o *installFlags) addFlags(f flags) {
	o.addTimeoutFlag(f, "how long each chart's install or upgrade may take, waiting for its Pods included")
	f.stringVar(&o.DataplaneBinary, "dataplane-binary", "", "static Linux meshctl binary to build the dataplane image from (default: this one)")
	f.imageVar(&o.ImageRegistry, "image-registry", "", "push the dataplane image to this registry (HOST[:PORT][/PATH]; credentials as docker push finds them) and run it from there: needed for existing clusters, whose nodes cannot be side-loaded")
}

func (o *installFlags) addTimeoutFlag(f flags, usage string) {
	f.durationVar(&o.Timeout, "install-timeout", installer.DefaultTimeout, usage)
}

func printInstall(w io.Writer, r *mesh.InstallReport) error {
	if r.Image != "" {
		if err := printDataplane(w, r); err != nil {
			return err
		}
	}
	if r.Istio != nil {
		if r.Image != "" {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "Istio's charts from %s, istiod image %s\n", r.Istio.Charts, strings.Join(r.Istio.Images, ", "))
		if n := len(r.Istio.ImageLoaded); n > 0 {
			fmt.Fprintf(w, "Side-loaded into %d kind node(s) (%d had it)\n", n, len(r.Istio.ImagePresent))
		}
		return printReleases(w, &installer.Result{Clusters: r.Istio.Clusters})
	}
	return nil
}

func printDataplane(w io.Writer, r *mesh.InstallReport) error {
	fmt.Fprintf(w, "Dataplane image %s (%s)\n", r.Image, r.ImageID)
	if r.Pushed != "" {
		fmt.Fprintf(w, "Pushed as %s\n", r.Pushed)
	}
	switch loaded, n := len(r.ImageLoaded), len(r.ImageLoaded)+len(r.ImagePresent); {
	case n == 0: // no kind nodes
	case loaded == n:
		fmt.Fprintf(w, "Side-loaded into %d kind node(s)\n", n)
	case loaded == 0:
		fmt.Fprintf(w, "Already on all %d kind node(s)\n", n)
	default:
		fmt.Fprintf(w, "Side-loaded into %d of %d kind node(s) (the others had it)\n", loaded, n)
	}
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

// uninstallOptions are uninstall's flags.
type uninstallOptions struct {
	Namespace string
	install   installFlags // the timeout only
	Output    string
}

func newUninstallCommand(g *globals) *cobra.Command {
	o := &uninstallOptions{}
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove meshctl's CNI and HBONE dataplane from every cluster",
		Long: `Uninstall meshctl's charts from every cluster of the environment, in
parallel, the dataplane before the CNI. install-cni takes meshctl-cni out of
each node's CNI config as its Pods stop. Charts that are not installed are
reported, not an error. Then the dataplane image meshctl side-loaded
(docker.io/meshctl/dataplane:<version>) is removed from the nodes of the kind
clusters whose charts are gone; a node where that fails is a warning, not an
error. Istio's releases (istiod, istio-base; --istio) go first, remotes before
their primaries, and are listed only where they were installed. The cacerts
Secret and the namespace stay.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			plan, err := g.environmentPlan(cmd)
			if err != nil {
				return err
			}
			cfg, err := g.meshConfig(meshFlags{install: &o.install})
			if err != nil {
				return err
			}
			un := mesh.NewUninstall(cfg)
			un.Namespace = o.Namespace
			res, err := un.Run(cmd.Context(), plan.Env, plan.Clusters)
			if err != nil {
				return err
			}
			if err := print(g.streams.Out, o.Output, res, func(w io.Writer) error { return printReleases(w, res) }); err != nil {
				return err
			}
			return res.Err("uninstall")
		},
	}
	f := flags{cmd.Flags()}
	f.stringVar(&o.Namespace, "namespace", installer.DefaultNamespace, "namespace the charts were installed in (global.istioNamespace)")
	o.install.addTimeoutFlag(f, "how long each chart's uninstall may take")
	addOutputFlag(f, &o.Output)
	return cmd
}
