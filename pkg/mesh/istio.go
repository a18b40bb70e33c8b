package mesh

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/install/installer"
	"github.com/meshctl/meshctl/pkg/install/istio"
)

type istioOptions struct {
	charts string
	images istio.Images
	docker istio.Docker
}

// WithIstio installs Istio's own control plane (its base and istiod charts,
// see pkg/install/istio) after meshctl's dataplane, in Up and Install:
// charts from the directory charts (empty: the istio.io/istio module
// download at istio.Version), images as images says (by default the offline
// build, side-loaded into kind nodes from the host's Docker).
func WithIstio(charts string, images istio.Images) Option {
	return func(o *options) { o.istio = &istioOptions{charts: charts, images: images, docker: istio.ExecDocker} }
}

// WithIstioAmbient makes WithIstio's install ambient (see
// istio.WithAmbient): Istio's istio-cni and ztunnel charts follow istiod,
// ztunnel runs meshctl's dataplane image (side-loaded as Install's is), and
// meshctl's own charts are left out — their CNI and node agent would
// redirect the same pods as istio-cni. The values must be the ambient
// profile's (values.WithProfile("ambient")), and the image the
// meshctl-dataplane binary's, which takes the ztunnel chart's arguments.
func WithIstioAmbient(b bool) Option { return func(o *options) { o.istioAmbient = b } }

// ambient says whether Istio is installed in ambient mode.
func (m *Config) ambient() bool { return m.o.istio != nil && m.o.istioAmbient }

// withIstioDocker replaces the docker CLI (tests).
func withIstioDocker(d istio.Docker) Option {
	return func(o *options) {
		if o.istio != nil {
			o.istio.docker = d
		}
	}
}

// IstioReport is what installing Istio did.
type IstioReport struct {
	Charts string   `json:"charts"`
	Images []string `json:"images"`
	// ImageLoaded are the kind nodes an image was side-loaded into
	// (node=image); ImagePresent those that had it already.
	ImageLoaded  []string                  `json:"imageLoaded,omitempty"`
	ImagePresent []string                  `json:"imagePresent,omitempty"`
	Clusters     []installer.ClusterResult `json:"clusters"`
}

type preparedIstio struct {
	charts  string
	targets []istio.Target
	images  []string // distinct images of Istio's build (istiod, install-cni), in target order
	// proxy is meshctl's dataplane image, ztunnel's in ambient mode.
	proxy *image.Image
}

// prepareIstio finds the charts, renders every cluster's values (exactly
// `values render`'s, plus the images) and checks them, and checks that an
// offline-built image is in the host's Docker; it touches no cluster.
func (m *Config) prepareIstio(ctx context.Context, plan *model.Plan, gateways []gateway.ClusterResult) (*preparedIstio, error) {
	o := m.o.istio
	charts := o.charts
	if charts == "" {
		var err error
		if charts, err = istio.ChartsDir(ctx, istio.Version); err != nil {
			return nil, err
		}
	}
	rendered, err := m.renderValues(plan, gateways)
	if err != nil {
		return nil, err
	}
	prep := &preparedIstio{charts: charts}
	var zt *istio.Ztunnel
	if m.ambient() {
		if zt, err = m.ztunnel(plan); err != nil {
			return nil, err
		}
		prep.proxy, _, _ = m.dataplaneImage()
	}
	for _, r := range rendered {
		c, _ := plan.Cluster(r.Name)
		v := o.images.Apply(r.Values)
		t := istio.Target{
			Target:  installer.Target{Cluster: c.Name, Kubeconfig: m.p.KubeconfigPath(plan.Env, c.Name, false), Values: v},
			Primary: c.PrimaryClusterName,
		}
		refs := []string{istio.PilotImage(v)}
		if zt != nil {
			z := *zt
			z.MeshCIDRs = nil
			for _, s := range meshCIDRs(plan, c) {
				z.MeshCIDRs = append(z.MeshCIDRs, fmt.Sprint(s))
			}
			t.Ztunnel = &z
			refs = append(refs, istio.CNIImage(v))
		}
		prep.targets = append(prep.targets, t)
		for _, ref := range refs {
			if !slices.Contains(prep.images, ref) {
				prep.images = append(prep.images, ref)
			}
			if c.Existing && offline(ref) {
				return nil, fmt.Errorf("cluster %q: existing clusters' nodes cannot be side-loaded with %s: give Istio's images from a registry they pull from with --istio-hub and --istio-tag", c.Name, ref)
			}
		}
	}
	if err := istio.New(istio.WithCharts(charts), istio.WithAmbient(m.ambient())).Validate(prep.targets...); err != nil {
		return nil, err
	}
	for _, ref := range prep.images {
		if offline(ref) && o.docker(ctx, "image", "inspect", "--format", "{{.Id}}", ref) != nil {
			return nil, fmt.Errorf("image %s is not in the host's Docker: build it with `make e2e-env` (hack/e2e/istio-build), or run Istio's images from a registry with --istio-hub and --istio-tag", ref)
		}
	}
	return prep, nil
}

// ztunnel is what every cluster's ztunnel runs in ambient mode: meshctl's
// dataplane image, which must hold the meshctl-dataplane binary (only it
// takes the `proxy ztunnel` Istio's chart runs), and which existing
// clusters can only pull from a registry it was pushed to.
func (m *Config) ztunnel(plan *model.Plan) (*istio.Ztunnel, error) {
	img, id, err := m.dataplaneImage()
	if err != nil {
		return nil, err
	}
	if img.Entrypoint() != image.DataplaneBinaryPath {
		return nil, fmt.Errorf("ambient mode runs meshctl's proxy with Istio's ztunnel chart, whose arguments (proxy ztunnel) only the %s binary takes; the image holds %s: put %s beside meshctl or on PATH (make build), or pass it with --dataplane-binary",
			image.DataplaneBinaryName, img.Binary(), image.DataplaneBinaryName)
	}
	for _, c := range plan.Clusters {
		if c.Existing && m.o.pushRegistry == "" {
			return nil, fmt.Errorf("cluster %q: existing clusters' nodes cannot be side-loaded with %s, which runs as ztunnel: push it to a registry they pull from with --image-registry HOST[:PORT][/PATH]", c.Name, img.Ref())
		}
	}
	return &istio.Ztunnel{Image: img.Ref(), ImageID: id}, nil
}

// offline says whether ref is one of hack/e2e/istio-build's images, which
// exist only in the host's Docker.
func offline(ref string) bool { return strings.HasPrefix(ref, istio.DefaultHub+"/") }

// installIstio installs Istio's base and istiod charts into every cluster of
// plan: istiod's image side-loaded into the kind nodes that lack it when the
// host's Docker has it (otherwise the nodes pull it), then the clusters that
// run their own control plane in parallel, then the remotes. The error is
// about input (nothing was touched); per-cluster failures are in the report.
func (m *Config) installIstio(ctx context.Context, plan *model.Plan, gateways ...gateway.ClusterResult) (*IstioReport, error) {
	if m.o.istio == nil {
		return nil, errors.New("mesh: installing Istio needs WithIstio")
	}
	prep, err := m.prepareIstio(ctx, plan, gateways)
	if err != nil {
		return nil, err
	}
	report := &IstioReport{Charts: prep.charts, Images: prep.images}
	if err := m.loadIstioImages(ctx, plan, prep.images, report); err != nil {
		return nil, err
	}
	in := istio.New(istio.WithCharts(prep.charts), istio.WithAmbient(m.ambient()), istio.WithTimeout(m.o.installTimeout), istio.WithClients(m.o.clients))
	names := "istio-base, istiod"
	if m.ambient() {
		names = "istio-base, istiod, istio-cni, ztunnel"
	}
	var res *installer.Result
	err = m.step(fmt.Sprintf("Installing Istio (%s) into %d cluster(s)", names, len(prep.targets)), func() error {
		var err error
		if res, err = in.Install(ctx, prep.targets...); err == nil && res.Failed() {
			return errFailedClusters
		}
		return err
	})
	if err != nil && !errors.Is(err, errFailedClusters) {
		return nil, err
	}
	report.Clusters = res.Clusters
	return report, nil
}

// loadIstioImages side-loads the images of refs the host's Docker has into
// the kind nodes of plan that lack them (the nodes pull the others). One
// `docker save` writes every image the host has — reading their IDs, which
// Missing compares, takes an archive, as it did one image at a time — and
// each node gets what it lacks in one import, all nodes in parallel
// (image.LoadArchives): pilot and install-cni share their base layers, and
// loading them one after the other cost the e2e suite's two nodes 3.8 and
// then 7 s.
func (m *Config) loadIstioImages(ctx context.Context, plan *model.Plan, refs []string, report *IstioReport) error {
	nodes, err := m.kindNodes(ctx, plan.Env, func(c model.ClusterPlan) bool {
		pc, ok := plan.Cluster(c.Name)
		return ok && !pc.Existing
	})
	if err != nil || len(nodes) == 0 {
		return err
	}
	dir, err := os.MkdirTemp("", "meshctl-istio-")
	if err != nil {
		return fmt.Errorf("saving Istio's images: %w", err)
	}
	defer os.RemoveAll(dir)
	docker := m.o.istio.docker
	all, found, err := istio.SaveFromDocker(ctx, docker, dir, refs...)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if !slices.Contains(found, ref) {
			m.o.logger.V(1).Infof(" • %s is not in the host's Docker: the nodes pull it", ref)
		}
	}
	type check struct {
		img     *image.Image
		missing []image.Node
	}
	checks := make([]*check, len(found))
	for k, ref := range found {
		img, err := image.FromArchive(all, ref)
		if err != nil {
			return err
		}
		checks[k] = &check{img: img}
	}
	// Every image's check on every node at once (Missing checks the nodes
	// in parallel).
	_ = parallel.ForEach(checks, func(c *check) error {
		c.missing = c.img.Missing(ctx, m.p, nodes...)
		return nil
	})
	want := make([]image.NodeImages, len(nodes))
	for j, n := range nodes {
		want[j].Node = n
	}
	loads := make([]int, len(found)) // nodes each image goes to
	for k, c := range checks {
		ref := found[k]
		for j, n := range nodes {
			if slices.Contains(c.missing, n) {
				report.ImageLoaded = append(report.ImageLoaded, n.Name+"="+ref)
				want[j].Refs = append(want[j].Refs, ref)
			} else {
				report.ImagePresent = append(report.ImagePresent, n.Name+"="+ref)
			}
		}
		loads[k] = len(c.missing)
		if loads[k] == 0 {
			m.o.logger.V(0).Infof(" • %s is already on all %d node(s)", ref, len(nodes))
		}
	}
	if !slices.ContainsFunc(loads, func(n int) bool { return n > 0 }) {
		return nil
	}
	save := func(ctx context.Context, refs []string) (string, error) {
		if slices.Equal(refs, found) {
			return all, nil
		}
		// A node lacking only some of the images (a load cut short, an
		// image rebuilt) gets an archive of those alone: sending it the
		// others again is what Missing spared it.
		path, got, err := istio.SaveFromDocker(ctx, docker, dir, refs...)
		if err == nil && !slices.Equal(got, refs) {
			err = fmt.Errorf("saving %s: no longer all in the host's Docker", strings.Join(refs, ", "))
		}
		return path, err
	}
	return m.step(loadingTitle(found, loads), func() error {
		return image.LoadArchives(ctx, m.p, save, want...)
	})
}

// loadingTitle names the images loaded and into how many nodes: "Loading a,
// b into 2 node(s)", or, when the counts differ, "Loading a into 2 node(s),
// b into 1 node(s)". loads[k] is the number of nodes refs[k] goes to; an
// image going to none is left out.
func loadingTitle(refs []string, loads []int) string {
	var names, each []string
	first, same := 0, true
	for k, ref := range refs {
		switch {
		case loads[k] == 0:
			continue
		case first == 0:
			first = loads[k]
		case loads[k] != first:
			same = false
		}
		names = append(names, ref)
		each = append(each, fmt.Sprintf("%s into %d node(s)", ref, loads[k]))
	}
	if same {
		return fmt.Sprintf("Loading %s into %d node(s)", strings.Join(names, ", "), first)
	}
	return "Loading " + strings.Join(each, ", ")
}

// uninstallIstio removes Istio's releases from the clusters cs of env,
// remotes first; it needs no charts. Only releases that were there are
// reported, so an environment without Istio reads as before.
func (m *Config) uninstallIstio(ctx context.Context, env string, cs []model.ClusterPlan, namespace string) (*installer.Result, error) {
	var targets []istio.Target
	for _, c := range cs {
		targets = append(targets, istio.Target{Primary: c.PrimaryClusterName, Target: installer.Target{
			Cluster: c.Name, Kubeconfig: m.p.KubeconfigPath(env, c.Name, false),
			Values: map[string]any{"global": map[string]any{"istioNamespace": namespace}}}})
	}
	res, err := istio.New(istio.WithTimeout(m.o.installTimeout), istio.WithClients(m.o.clients)).Uninstall(ctx, targets...)
	if err != nil {
		return nil, err
	}
	for n, c := range res.Clusters {
		var kept []installer.ReleaseResult
		for _, r := range c.Releases {
			if r.Action != installer.ActionAbsent {
				kept = append(kept, r)
			}
		}
		res.Clusters[n].Releases = kept
	}
	return res, nil
}
