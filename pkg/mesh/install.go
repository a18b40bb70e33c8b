package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/internal/parallel"
	"github.com/meshctl/meshctl/internal/trace"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/connect/gateway"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/install/installer"
	"github.com/meshctl/meshctl/pkg/install/values"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// Charts are meshctl's charts, in install order.
var Charts = []string{"meshctl-cni", "meshctl-dataplane"}

// InstallReport is what Install did: the image and each cluster's releases.
type InstallReport struct {
	Env     string `json:"env"`
	Image   string `json:"image"`
	ImageID string `json:"imageID"`
	// Pushed is where the image was pushed (WithImageRegistry), with digest.
	Pushed string `json:"pushed,omitempty"`
	// ImageLoaded are the kind nodes the image was side-loaded into;
	// ImagePresent those that had this very image already (a rerun).
	ImageLoaded  []string                  `json:"imageLoaded,omitempty"`
	ImagePresent []string                  `json:"imagePresent,omitempty"`
	Clusters     []installer.ClusterResult `json:"clusters"`
	// Istio is Istio's control plane (WithIstio).
	Istio *IstioReport `json:"istio,omitempty"`
}

// Failed lists the clusters whose install failed.
func (r *InstallReport) Failed() []string {
	var out []string
	for _, c := range r.results() {
		if c.Error != "" && !slices.Contains(out, c.Cluster) {
			out = append(out, c.Cluster)
		}
	}
	return out
}

// Err is the install's error when a cluster failed (nil otherwise), naming
// each failed cluster with its cause, the dataplane's and Istio's.
func (r *InstallReport) Err() error {
	return (&installer.Result{Clusters: r.results()}).Err("install")
}

// results are the dataplane's cluster results, then Istio's.
func (r *InstallReport) results() []installer.ClusterResult {
	if r.Istio == nil {
		return r.Clusters
	}
	return append(slices.Clone(r.Clusters), r.Istio.Clusters...)
}

// install installs meshctl's charts into every cluster of plan, in parallel:
// values (with the east-west gateway addresses connect found), the image
// (side-loaded into kind nodes, pushed with WithImageRegistry), then the
// charts. Input is checked in full before anything is changed: the error is
// about input or reachability, per-cluster failures are in the report (see
// InstallReport.Failed). With WithIstio, Istio's control plane follows
// (see installIstio); WithInstall(false) leaves the dataplane out. In
// ambient mode (WithIstioAmbient) meshctl's charts are left out whatever
// WithInstall says: the dataplane image is shipped, and runs as Istio's
// ztunnel.
func (m *Config) install(ctx context.Context, plan *model.Plan, gateways ...gateway.ClusterResult) (*InstallReport, error) {
	ctx, unlock, err := m.lock(ctx, plan.Env, "install")
	if err != nil {
		return nil, err
	}
	defer unlock()
	report := &InstallReport{Env: plan.Env, Clusters: []installer.ClusterResult{}}
	switch {
	case m.ambient():
		if err := m.shipProxyImage(ctx, plan, report); err != nil {
			return nil, err
		}
	case m.o.install:
		var err error
		if report, err = m.installDataplane(ctx, plan, gateways); err != nil {
			return nil, err
		}
	}
	if m.o.istio != nil {
		ist, err := m.installIstio(ctx, plan, gateways...)
		if err != nil {
			return report, err
		}
		report.Istio = ist
	}
	return report, nil
}

func (m *Config) installDataplane(ctx context.Context, plan *model.Plan, gateways []gateway.ClusterResult) (*InstallReport, error) {
	// The checks before the charts' status line have none of their own.
	trace.Step("Checking the dataplane image and cacerts (no status line)")
	prep, err := m.prepareInstall(plan, gateways)
	if err != nil {
		return nil, err
	}
	if err := requireCacerts(ctx, m.o.clients, prep.targets); err != nil {
		return nil, err
	}
	img := prep.img
	report := &InstallReport{Env: plan.Env, Image: img.Ref(), ImageID: prep.id}
	if m.o.pushRegistry != "" {
		if err := m.step(fmt.Sprintf("Pushing %s", img.Ref()), func() error {
			report.Pushed, err = img.Push(ctx)
			return err
		}); err != nil {
			return nil, err
		}
	}
	if err := m.loadImage(ctx, plan, img, report); err != nil {
		return nil, err
	}
	var res *installer.Result
	err = m.step(fmt.Sprintf("Installing %s into %d cluster(s)", strings.Join(Charts, " and "), len(prep.targets)), func() error {
		var err error
		if res, err = prep.installer.Install(ctx, prep.targets...); err == nil && res.Failed() {
			return errFailedClusters // the status line only: the report says which
		}
		return err
	})
	if err != nil && !errors.Is(err, errFailedClusters) {
		return nil, err
	}
	report.Clusters = res.Clusters
	return report, nil
}

// shipProxyImage gets the dataplane image to every node, as
// installDataplane does, for Istio's ztunnel chart to run: pushed with
// WithImageRegistry, side-loaded into kind nodes.
func (m *Config) shipProxyImage(ctx context.Context, plan *model.Plan, report *InstallReport) error {
	if _, err := m.ztunnel(plan); err != nil {
		return err
	}
	img, id, err := m.dataplaneImage()
	if err != nil {
		return err
	}
	report.Image, report.ImageID = img.Ref(), id
	if m.o.pushRegistry != "" {
		if err := m.step(fmt.Sprintf("Pushing %s", img.Ref()), func() error {
			report.Pushed, err = img.Push(ctx)
			return err
		}); err != nil {
			return err
		}
	}
	return m.loadImage(ctx, plan, img, report)
}

// errFailedClusters marks a status line whose step failed in some clusters;
// the caller gets the report, not this error.
var errFailedClusters = errors.New("failed in some clusters")

type preparedInstall struct {
	img       *image.Image
	id        string
	targets   []installer.Target
	installer *installer.Installer
}

// validateInstall checks what Install would install into plan's clusters
// without touching any of them, so `up` can refuse bad values, a bad image
// or an existing cluster without an image source before creating anything.
func (m *Config) validateInstall(plan *model.Plan) error {
	if m.o.install && !m.ambient() {
		if _, err := m.prepareInstall(plan, nil); err != nil {
			return err
		}
	}
	if m.o.istio != nil {
		if _, err := m.prepareIstio(context.Background(), plan, nil); err != nil {
			return err
		}
	}
	return nil
}

// prepareInstall renders and checks everything Install needs: values
// against the charts' schemas, the image, and where existing clusters will
// get the image from.
func (m *Config) prepareInstall(plan *model.Plan, gateways []gateway.ClusterResult) (*preparedInstall, error) {
	rendered, err := m.renderValues(plan, gateways)
	if err != nil {
		return nil, err
	}
	img, id, err := m.dataplaneImage()
	if err != nil {
		return nil, err
	}
	prep := &preparedInstall{img: img, id: id, targets: make([]installer.Target, len(rendered)),
		installer: installer.New(installer.WithTimeout(m.o.installTimeout), installer.WithClients(m.o.clients))}
	var unreachable []string
	for n, r := range rendered {
		c, _ := plan.Cluster(r.Name)
		v := r.Values
		if c.Existing && m.o.pushRegistry == "" && !userImage(v) {
			unreachable = append(unreachable, c.Name)
		}
		// What meshctl knows goes under what the user set.
		fillDefaults(v, "image", map[string]any{"repository": img.Repository(), "tag": img.TagName(), "id": id})
		fillDefaults(v, "proxy", map[string]any{"meshCIDRs": meshCIDRs(plan, c)})
		prep.targets[n] = installer.Target{Cluster: c.Name, Kubeconfig: m.p.KubeconfigPath(plan.Env, c.Name, false), Values: v}
	}
	if len(unreachable) > 0 {
		// Their nodes are not containers on this machine: side-loading
		// cannot reach them, and the pods would only sit in ImagePullBackOff.
		return nil, fmt.Errorf("cluster(s) %s: existing clusters' nodes cannot be side-loaded with %s; push it to a registry they pull from with --image-registry HOST[:PORT][/PATH], set image.repository to where it already is, or skip the install (--install=false)",
			strings.Join(unreachable, ", "), img.Ref())
	}
	if err := prep.installer.Validate(prep.targets...); err != nil {
		return nil, err
	}
	return prep, nil
}

// renderValues renders every cluster's values as `meshctl values render`
// does, with the east-west gateway addresses the user gave, and those
// connect found for the other networks.
func (m *Config) renderValues(plan *model.Plan, gateways []gateway.ClusterResult) ([]values.Cluster, error) {
	// Where connect exposed a primary's istiod comes first: an address the
	// user gave (in valuesOpts) overrides it.
	var vopts []values.Option
	for _, g := range gateways {
		if a := g.IstiodAddress(); a != "" {
			vopts = append(vopts, values.WithIstiodAddress(g.Cluster, a))
		}
	}
	vopts = append(vopts, m.o.valuesOpts...)
	for network, addrs := range m.o.gatewayAddrs {
		for _, a := range addrs {
			vopts = append(vopts, values.WithGatewayAddress(network, a))
		}
	}
	// What connect found fills in every network the user did not give.
	for network, addrs := range (&gateway.Result{Clusters: gateways}).GatewayAddresses() {
		if _, given := m.o.gatewayAddrs[network]; given {
			continue
		}
		for _, a := range addrs {
			vopts = append(vopts, values.WithGatewayAddress(network, a))
		}
	}
	// Each primary's east-west gateway is where its remotes reach istiod.
	for _, g := range gateways {
		if a := g.Address(); a != "" {
			vopts = append(vopts, values.WithClusterGatewayAddress(g.Cluster, a))
		}
	}
	return values.New(vopts...).Render(plan)
}

// dataplaneImage builds the image once per Config: Up validates the install
// before creating clusters and installs after, and the image (the binary
// read, layered, compressed and hashed) depends only on the options.
func (m *Config) dataplaneImage() (*image.Image, string, error) {
	m.imgOnce.Do(func() {
		iopts := append([]image.Option{}, m.o.imageOpts...)
		if m.o.pushRegistry != "" {
			iopts = append(iopts, image.WithRegistry(m.o.pushRegistry))
		}
		if m.img, m.imgErr = image.New(iopts...); m.imgErr == nil {
			m.imgID, m.imgErr = m.img.ID()
			if n := m.img.Notice(); n != "" {
				m.o.logger.Warnf("%s", n)
			}
		}
	})
	return m.img, m.imgID, m.imgErr
}

// userImage says whether the user's values name the image themselves.
func userImage(v map[string]any) bool {
	m, ok := v["image"].(map[string]any)
	if !ok {
		return false
	}
	r, ok := m["repository"].(string)
	return ok && r != ""
}

// Uninstall removes meshctl's releases from the clusters cs of env, in
// parallel, the dataplane before the CNI; then the dataplane image Install
// side-loaded, from the nodes of the kind clusters whose releases are gone
// (see removeImage: failures there are warnings).
func (m *Config) uninstall(ctx context.Context, env string, cs []model.ClusterPlan, namespace string) (*installer.Result, error) {
	ctx, unlock, err := m.lock(ctx, env, "uninstall")
	if err != nil {
		return nil, err
	}
	defer unlock()
	var targets []installer.Target
	for _, c := range cs {
		targets = append(targets, installer.Target{Cluster: c.Name, Kubeconfig: m.p.KubeconfigPath(env, c.Name, false),
			Values: map[string]any{"global": map[string]any{"istioNamespace": namespace}}})
	}
	// Istio's releases go first (remotes before their primaries); where
	// there were none, nothing is said.
	ist, err := m.uninstallIstio(ctx, env, cs, namespace)
	if err != nil {
		return nil, err
	}
	var res *installer.Result
	err = m.step(fmt.Sprintf("Uninstalling meshctl's charts from %d cluster(s)", len(targets)), func() error {
		var err error
		if res, err = installer.New(installer.WithTimeout(m.o.installTimeout), installer.WithClients(m.o.clients)).Uninstall(ctx, targets...); err == nil && res.Failed() {
			return errFailedClusters
		}
		return err
	})
	if err != nil && !errors.Is(err, errFailedClusters) {
		return nil, err
	}
	m.removeImage(ctx, env, cs, res)
	for n, c := range ist.Clusters {
		res.Clusters[n].Releases = append(c.Releases, res.Clusters[n].Releases...)
		res.Clusters[n].Error = strings.Trim(c.Error+"; "+res.Clusters[n].Error, "; ")
	}
	return res, nil
}

// removeImage deletes the dataplane image, by the exact reference Install
// side-loads it under, from every node of the kind clusters of cs whose
// uninstall succeeded: a cluster whose charts are still there keeps the
// image its pods may need to restart, and existing clusters' nodes are not
// containers on this machine (they pulled the image from a registry, which
// meshctl leaves alone). Nothing here fails the uninstall — the charts are
// gone already — so every problem is a warning, naming the node.
func (m *Config) removeImage(ctx context.Context, env string, cs []model.ClusterPlan, res *installer.Result) {
	failed := map[string]bool{}
	for _, c := range res.Clusters {
		if c.Error != "" {
			failed[c.Cluster] = true
		}
	}
	targets := map[string]bool{}
	for _, c := range cs {
		if !c.Existing && !failed[c.Name] {
			targets[c.Name] = true
		}
	}
	if len(targets) == 0 {
		return
	}
	img, _, err := m.dataplaneImage()
	if err != nil {
		m.o.logger.Warnf("leaving the dataplane image on the kind nodes: %v", err)
		return
	}
	nodes, err := m.kindNodes(ctx, env, func(c model.ClusterPlan) bool { return targets[c.Name] })
	m.warnEach(fmt.Sprintf("leaving %s in place: ", img.ContainerdRef()), err)
	if len(nodes) == 0 {
		return
	}
	err = m.step(fmt.Sprintf("Removing %s from %d node(s)", img.ContainerdRef(), len(nodes)), func() error {
		return img.Remove(ctx, m.p, nodes...)
	})
	m.warnEach("", err)
}

// warnEach logs every error joined in err (errors.Join, parallel.ForEach)
// as a warning of its own, each after prefix.
func (m *Config) warnEach(prefix string, err error) {
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		m.o.logger.Warnf("%s%v", prefix, e)
	}
}

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
func meshCIDRs(plan *model.Plan, c model.ClusterPlan) []any {
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
func requireCacerts(ctx context.Context, clients *kubeclient.Factory, targets []installer.Target) error {
	return parallel.ForEach(targets, func(t installer.Target) error {
		secret := "cacerts"
		if s, ok := t.Values["signer"].(map[string]any); ok {
			if n, ok := s["cacertsSecret"].(string); ok && n != "" {
				secret = n
			}
		}
		ns := installer.Namespace(t.Values)
		kc := clients.File(t.Kubeconfig, "", kubeclient.WithTimeout(15*time.Second))
		if _, err := kc.RESTConfig(); err != nil {
			return fmt.Errorf("cluster %q: kubeconfig: %w", t.Cluster, err)
		}
		cs, err := kc.Kubernetes()
		if err != nil {
			return fmt.Errorf("cluster %q: %w", t.Cluster, err)
		}
		_, err = cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("cluster %q has no Secret %s/%s, the intermediate CA the signer signs with: run `meshctl up` (it installs it unless --cacerts=false)", t.Cluster, ns, secret)
		case err != nil:
			return fmt.Errorf("cluster %q is unreachable at %s: %w", t.Cluster, kc.Host(), err)
		}
		return nil
	})
}

// loadImage side-loads the image into every node of every kind cluster of
// plan (existing clusters pull it from the registry it was pushed to).
func (m *Config) loadImage(ctx context.Context, plan *model.Plan, img *image.Image, report *InstallReport) error {
	nodes, err := m.kindNodes(ctx, plan.Env, func(c model.ClusterPlan) bool {
		pc, ok := plan.Cluster(c.Name)
		return ok && !pc.Existing
	})
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		return nil
	}
	missing := img.Missing(ctx, m.p, nodes...)
	for _, n := range nodes {
		if slices.Contains(missing, n) {
			report.ImageLoaded = append(report.ImageLoaded, n.Name)
		} else {
			report.ImagePresent = append(report.ImagePresent, n.Name)
		}
	}
	if len(missing) == 0 {
		m.o.logger.V(0).Infof(" • %s is already on all %d node(s)", img.Ref(), len(nodes))
		return nil
	}
	title := fmt.Sprintf("Loading %s into %d node(s)", img.Ref(), len(missing))
	if len(missing) < len(nodes) {
		title += fmt.Sprintf(" (%d have it)", len(nodes)-len(missing))
	}
	return m.step(title, func() error { return img.Load(ctx, m.p, missing...) })
}

// kindNodes lists, from each cluster's API server, the nodes of the kind
// clusters of env that include selects. A cluster whose nodes cannot be read
// is an error naming it (joined with the others'); the nodes of the rest are
// returned with it.
func (m *Config) kindNodes(ctx context.Context, env string, include func(model.ClusterPlan) bool) ([]image.Node, error) {
	st, err := m.p.Status(cluster.WithoutRouteCheck(ctx), env, "")
	if err != nil {
		return nil, err
	}
	var nodes []image.Node
	var errs []error
	for _, c := range st.Clusters {
		if c.Existing || !include(c.ClusterPlan) {
			continue
		}
		if c.Error != "" {
			errs = append(errs, fmt.Errorf("cluster %q: listing nodes: %s", c.Name, c.Error))
			continue
		}
		for _, n := range c.Nodes {
			nodes = append(nodes, image.Node{Cluster: c.KindName, Name: n.Name})
		}
	}
	return nodes, errors.Join(errs...)
}
