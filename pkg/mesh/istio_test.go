package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/internal/testbin"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/install/image"
	"github.com/meshctl/meshctl/pkg/install/istio"
	"github.com/meshctl/meshctl/pkg/install/values"
)

// TestUpIstioChecksImagesFirst: `up --istio` without the offline istiod
// image in the host's Docker fails before any cluster is created, saying
// how to get it; with it, the install validates.
func TestUpIstioChecksImagesFirst(t *testing.T) {
	charts, err := istio.ChartsDir(context.Background(), istio.Version)
	if err != nil {
		t.Skipf("Istio's charts unavailable: %v", err)
	}
	var asked []string
	docker := func(_ context.Context, args ...string) error {
		asked = append(asked, strings.Join(args, " "))
		return errors.New("No such image")
	}
	p := &fakeProvider{dir: t.TempDir()}
	_, err = NewUp(NewConfig(p, WithArtifacts(t.TempDir()), WithInstall(false), WithIstio(charts, istio.Images{}), withIstioDocker(docker))).Run(context.Background(), plan(t))
	want := "image meshctl/pilot:" + istio.Version + " is not in the host's Docker"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--istio-hub") {
		t.Fatalf("Up error %v, want %q", err, want)
	}
	if p.ups != 0 {
		t.Error("clusters were created before the error")
	}

	// An existing cluster cannot be side-loaded: it needs a registry.
	_, err = NewUp(NewConfig(p, WithArtifacts(t.TempDir()), WithInstall(false), WithIstio(charts, istio.Images{}), withIstioDocker(docker))).Run(context.Background(), plan(t, 2))
	if err == nil || !strings.Contains(err.Error(), `cluster "cluster3": existing clusters' nodes cannot be side-loaded`) {
		t.Errorf("existing cluster: %v", err)
	}

	// Images from a registry are the nodes' to pull: nothing asks Docker.
	asked = nil
	b := NewConfig(p, WithInstall(false), WithIstio(charts, istio.Images{Hub: "docker.io/istio", Tag: "1.29.0"}), withIstioDocker(docker))
	if err := NewInstall(b).Validate(plan(t, 2)); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 0 {
		t.Errorf("asked Docker %q for a registry's image", asked)
	}
}

// TestUpIstioAmbientRefusesFirst: ambient mode runs meshctl's proxy with
// Istio's ztunnel chart, so it refuses, before creating any cluster, an
// image of the whole meshctl (which does not take the chart's `proxy
// ztunnel`) and values without the ambient profile; with both right, and
// Istio's images from a registry, the install validates.
func TestUpIstioAmbientRefusesFirst(t *testing.T) {
	charts, err := istio.ChartsDir(context.Background(), istio.Version)
	if err != nil {
		t.Skipf("Istio's charts unavailable: %v", err)
	}
	noDocker := func(context.Context, ...string) error { return errors.New("no docker in this test") }
	registry := istio.Images{Hub: "docker.io/istio", Tag: "1.29.0"}
	dataplane := testbin.Static(t, image.DataplaneBinaryName, "package main\n\nfunc main() {}\n")
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"whole meshctl", []Option{WithImage(image.WithBinary(staticBinary(t))), WithValues(values.WithProfile("ambient"))}, "only the meshctl-dataplane binary takes"},
		{"default profile", []Option{WithImage(image.WithBinary(dataplane))}, "--profile ambient"},
	} {
		p := &fakeProvider{dir: t.TempDir()}
		opts := append([]Option{WithArtifacts(t.TempDir()), WithIstio(charts, registry), WithIstioAmbient(true), withIstioDocker(noDocker)}, tc.opts...)
		_, err := NewUp(NewConfig(p, opts...)).Run(context.Background(), plan(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Up error %v, want %q", tc.name, err, tc.want)
		}
		if p.ups != 0 {
			t.Errorf("%s: clusters were created before the error", tc.name)
		}
	}
	b := NewConfig(&fakeProvider{dir: t.TempDir()}, WithIstio(charts, registry), WithIstioAmbient(true), withIstioDocker(noDocker),
		WithImage(image.WithBinary(dataplane)), WithValues(values.WithProfile("ambient")))
	if err := NewInstall(b).Validate(plan(t)); err != nil {
		t.Fatal(err)
	}
	// An existing cluster pulls ztunnel's image: it needs a registry.
	if err := NewInstall(b).Validate(plan(t, 2)); err == nil || !strings.Contains(err.Error(), "which runs as ztunnel: push it") {
		t.Errorf("existing cluster without a registry: %v", err)
	}
}

// istioDocker is the host's Docker as loadIstioImages sees it: it has the
// images of imgs (small random ones), saves them as `docker save refs...`
// does, and records the refs of each save.
type istioDocker struct {
	imgs  map[string]v1.Image
	mu    sync.Mutex
	saves []string
}

func (d *istioDocker) run(_ context.Context, args ...string) error {
	switch {
	case len(args) == 5 && args[0] == "image" && args[1] == "inspect":
		if d.imgs[args[4]] == nil {
			return errors.New("Error: No such image: " + args[4])
		}
		return nil
	case len(args) > 3 && args[0] == "save" && args[1] == "-o":
		d.mu.Lock()
		d.saves = append(d.saves, strings.Join(args[3:], " "))
		d.mu.Unlock()
		m := map[name.Reference]v1.Image{}
		for _, ref := range args[3:] {
			tag, err := name.NewTag(ref)
			if err != nil || d.imgs[ref] == nil {
				return fmt.Errorf("no image %s (%v)", ref, err)
			}
			m[tag] = d.imgs[ref]
		}
		return tarball.MultiRefWriteToFile(args[2], m)
	}
	return fmt.Errorf("unexpected docker %q", args)
}

// istioNodes are the kind nodes' containerd: has says which images (by
// their docker name) each holds; each import records the images of its
// archive, then waits until want imports have started, failing unless
// they run at the same time.
type istioNodes struct {
	has     map[string][]string
	want    int
	mu      sync.Mutex
	imports map[string][]string // node → the images of each archive it got, sorted
	started int
	all     chan struct{}
}

func (n *istioNodes) exec(node string, stdin []byte, argv []string) error {
	if len(argv) == 6 && argv[3] == "has" { // Missing's check: sh -c script has <containerd name> <ID>
		if slices.ContainsFunc(n.has[node], func(ref string) bool { return "docker.io/"+ref == argv[4] }) {
			return nil
		}
		return errors.New("absent")
	}
	if stdin == nil || !strings.Contains(strings.Join(argv, " "), "images import") {
		return fmt.Errorf("unexpected exec %q", argv)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(stdin)), nil })
	if err != nil {
		return err
	}
	var tags []string
	for _, d := range m {
		tags = append(tags, d.RepoTags...)
	}
	slices.Sort(tags)
	n.mu.Lock()
	n.imports[node] = append(n.imports[node], strings.Join(tags, " "))
	if n.started++; n.started == n.want {
		close(n.all)
	}
	n.mu.Unlock()
	select {
	case <-n.all:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("the other nodes' imports did not start alongside this one")
	}
}

// TestLoadIstioImages: Istio's images that the host's Docker has are saved
// with one `docker save`, and every node lacking some gets them in one
// import, the nodes at the same time; a node lacking only some gets an
// archive of those alone, and a node with an image does not get it again;
// an image the host lacks is left to the nodes to pull. The report names,
// node by node, each image loaded and each already there; the step names
// what goes into how many nodes; a failed import names the images and the
// node.
func TestLoadIstioImages(t *testing.T) {
	pilot, cni, pulled := "meshctl/pilot:t", "meshctl/install-cni:t", "docker.io/istio/proxyv2:1.29.0"
	cp1, w1, cp2 := "mt-cluster1-control-plane", "mt-cluster1-worker", "mt-cluster2-control-plane"
	docker := &istioDocker{imgs: map[string]v1.Image{}}
	for _, ref := range []string{pilot, cni} {
		img, err := random.Image(512, 2)
		if err != nil {
			t.Fatal(err)
		}
		docker.imgs[ref] = img
	}
	kindCluster := func(name string, existing bool, nodes ...string) cluster.ClusterStatus {
		c := cluster.ClusterStatus{ClusterState: model.ClusterState{ClusterPlan: model.ClusterPlan{Name: name, KindName: "mt-" + name, Existing: existing}}, Ready: true}
		for _, n := range nodes {
			c.Nodes = append(c.Nodes, cluster.NodeStatus{Name: n})
		}
		return c
	}
	status := &cluster.StatusResult{Env: "mt", Clusters: []cluster.ClusterStatus{
		kindCluster("cluster1", false, cp1, w1), kindCluster("cluster2", false, cp2), kindCluster("cluster3", true, "cloud-node")}}
	both := cni + " " + pilot // an archive's images, sorted
	for _, tc := range []struct {
		name            string
		has             map[string][]string
		fail            string // the node whose every exec fails
		want            int    // imports that run at once
		saves           []string
		imports         map[string][]string
		loaded, present []string
		log             []string
		err             string
	}{
		{
			name: "fresh nodes", want: 3,
			saves:   []string{pilot + " " + cni},
			imports: map[string][]string{cp1: {both}, w1: {both}, cp2: {both}},
			loaded:  []string{cp1 + "=" + pilot, w1 + "=" + pilot, cp2 + "=" + pilot, cp1 + "=" + cni, w1 + "=" + cni, cp2 + "=" + cni},
			log: []string{" • " + pulled + " is not in the host's Docker: the nodes pull it",
				" • Loading " + pilot + ", " + cni + " into 3 node(s) ...", "done: Loading " + pilot + ", " + cni + " into 3 node(s)"},
		},
		{
			name: "some images on some nodes", has: map[string][]string{cp1: {pilot, cni}, w1: {pilot}}, want: 2,
			saves:   []string{pilot + " " + cni, cni},
			imports: map[string][]string{w1: {cni}, cp2: {both}},
			loaded:  []string{cp2 + "=" + pilot, w1 + "=" + cni, cp2 + "=" + cni},
			present: []string{cp1 + "=" + pilot, w1 + "=" + pilot, cp1 + "=" + cni},
			log:     []string{"done: Loading " + pilot + " into 1 node(s), " + cni + " into 2 node(s)"},
		},
		{
			name: "every image on every node", has: map[string][]string{cp1: {pilot, cni}, w1: {pilot, cni}, cp2: {pilot, cni}},
			saves:   []string{pilot + " " + cni},
			imports: map[string][]string{},
			present: []string{cp1 + "=" + pilot, w1 + "=" + pilot, cp2 + "=" + pilot, cp1 + "=" + cni, w1 + "=" + cni, cp2 + "=" + cni},
			log:     []string{" • " + pilot + " is already on all 3 node(s)", " • " + cni + " is already on all 3 node(s)"},
		},
		{
			name: "a failed import", fail: cp2, want: 2,
			saves:   []string{pilot + " " + cni},
			imports: map[string][]string{cp1: {both}, w1: {both}},
			loaded:  []string{cp1 + "=" + pilot, w1 + "=" + pilot, cp2 + "=" + pilot, cp1 + "=" + cni, w1 + "=" + cni, cp2 + "=" + cni},
			err:     "loading " + pilot + ", " + cni + " into node " + cp2 + " of cluster mt-cluster2: ctr: connection refused",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := &istioNodes{has: tc.has, want: tc.want, imports: map[string][]string{}, all: make(chan struct{})}
			p := &fakeProvider{dir: t.TempDir(), status: status, execHook: nodes.exec}
			if tc.fail != "" {
				p.execFail = map[string]bool{tc.fail: true}
			}
			docker.saves = nil
			var logs bytes.Buffer
			b := NewConfig(p, WithLogger(cli.NewLogger(&logs, cli.WithVerbosity(1))), WithIstio("", istio.Images{}), withIstioDocker(docker.run))
			report := &IstioReport{}
			err := b.loadIstioImages(context.Background(), plan(t, 2), []string{pilot, pulled, cni}, report)
			t.Logf("log:\n%s", logs.String())
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("loadIstioImages error %v, want %q", err, tc.err)
			}
			if !slices.Equal(docker.saves, tc.saves) {
				t.Errorf("docker saves %q, want %q", docker.saves, tc.saves)
			}
			if !maps.EqualFunc(nodes.imports, tc.imports, slices.Equal) {
				t.Errorf("imports %q, want %q", nodes.imports, tc.imports)
			}
			if !slices.Equal(report.ImageLoaded, tc.loaded) || !slices.Equal(report.ImagePresent, tc.present) {
				t.Errorf("report: loaded %q, present %q; want %q, %q", report.ImageLoaded, report.ImagePresent, tc.loaded, tc.present)
			}
			for _, line := range tc.log {
				if !strings.Contains(logs.String(), line) {
					t.Errorf("log lacks %q", line)
				}
			}
		})
	}
}
