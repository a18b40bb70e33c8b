package gateway

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func containers(t *testing.T, objs []*unstructured.Unstructured, kind, name string) []map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			if err != nil {
				t.Fatal(err)
			}
			var out []map[string]any
			for _, c := range cs {
				out = append(out, c.(map[string]any))
			}
			return out
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// The embedded file must be upstream's metallb-native.yaml of
// MetalLBVersion: its images are those of that release and it has no FRR.
func TestEmbeddedManifestIsUpstreams(t *testing.T) {
	t.Parallel()
	s := string(metallbNative)
	for _, want := range []string{"image: " + UpstreamControllerImage, "image: " + UpstreamSpeakerImage} {
		if strings.Count(s, want) != 1 {
			t.Errorf("embedded manifest should name %q once", want)
		}
	}
	if strings.Contains(s, "frr") && strings.Contains(s, "image: quay.io/frrouting") {
		t.Error("embedded manifest is an FRR variant; want metallb-native.yaml")
	}
	if !strings.Contains(MetalLBLicense, "Apache License") {
		t.Error("MetalLB's license is not embedded")
	}
	objs, err := decodeYAML(metallbNative)
	if err != nil {
		t.Fatal(err)
	}
	if objs[0].GetKind() != "Namespace" || objs[0].GetName() != MetalLBNamespace {
		t.Errorf("first object is %s %s, want the namespace first", objs[0].GetKind(), objs[0].GetName())
	}
	var crds []string
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o.GetName())
		}
		if _, ok, _ := unstructured.NestedFieldNoCopy(o.Object, "metadata", "creationTimestamp"); ok {
			t.Errorf("%s %s keeps creationTimestamp", o.GetKind(), o.GetName())
		}
	}
	for _, want := range []string{"ipaddresspools.metallb.io", "l2advertisements.metallb.io"} {
		if !slices.Contains(crds, want) {
			t.Errorf("no CRD %s in %v", want, crds)
		}
	}
}

func TestMetalLBObjectsRewritesImages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		opts                []Option
		controller, speaker string
	}{
		{"default: offline images", nil, DefaultControllerImage, DefaultSpeakerImage},
		{"upstream", []Option{WithUpstreamImages()}, UpstreamControllerImage, UpstreamSpeakerImage},
		{"own registry", []Option{WithImages("localhost:5000/c:1", "localhost:5000/s:1")}, "localhost:5000/c:1", "localhost:5000/s:1"},
		{"only the speaker", []Option{WithImages("", "s:2")}, DefaultControllerImage, "s:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			i := New(nil, tc.opts...)
			objs, err := metallbObjects(i.controllerImage, i.speakerImage)
			if err != nil {
				t.Fatal(err)
			}
			c := containers(t, objs, "Deployment", "controller")
			if len(c) != 1 || c[0]["image"] != tc.controller {
				t.Errorf("controller containers %v, want image %s", c, tc.controller)
			}
			s := containers(t, objs, "DaemonSet", "speaker")
			if len(s) != 1 || s[0]["image"] != tc.speaker {
				t.Errorf("speaker containers %v, want image %s", s, tc.speaker)
			}
			// Readiness probed early and often, liveness as shipped.
			for what, cs := range map[string][]map[string]any{"controller": c, "speaker": s} {
				ready, live := cs[0]["readinessProbe"].(map[string]any), cs[0]["livenessProbe"].(map[string]any)
				if ready["initialDelaySeconds"] != 1.0 || ready["periodSeconds"] != 2.0 {
					t.Errorf("%s readinessProbe %v: want initialDelaySeconds 1, periodSeconds 2", what, ready)
				}
				if live["initialDelaySeconds"] != 10.0 || live["periodSeconds"] != 10.0 {
					t.Errorf("%s livenessProbe %v: want upstream's 10 s and 10 s", what, live)
				}
			}
			if args := c[0]["args"].([]any); !slices.Contains(args, any(webhookDisabledArg)) || !slices.Contains(args, any("--port=7472")) {
				t.Errorf("controller args %v: want upstream's plus %s", args, webhookDisabledArg)
			}
			for _, o := range objs {
				if o.GetKind() == "ValidatingWebhookConfiguration" {
					t.Errorf("%s %s applied: nothing serves it", o.GetKind(), o.GetName())
				}
			}
			args := s[0]["args"].([]any)
			if !slices.Contains(args, any("--ignore-exclude-lb")) || !slices.Contains(args, any("--port=7472")) {
				t.Errorf("speaker args %v: want upstream's plus --ignore-exclude-lb", args)
			}
		})
	}
	// the embedded bytes are parsed afresh each time: one call's rewrite
	// never leaks into the next
	a, _ := metallbObjects("a", "a")
	b, _ := metallbObjects("b", "b")
	if containers(t, a, "Deployment", "controller")[0]["image"] != "a" || containers(t, b, "Deployment", "controller")[0]["image"] != "b" {
		t.Error("rewrites leak between calls")
	}
}

func TestDecodeYAMLErrors(t *testing.T) {
	t.Parallel()
	if _, err := decodeYAML([]byte("a: [")); err == nil {
		t.Error("want an error for broken YAML")
	}
	if _, err := decodeYAML([]byte("---\nmetadata: {name: x}\n")); err == nil || !strings.Contains(err.Error(), "object 1: no kind") {
		t.Errorf("err = %v, want object 1 without kind", err)
	}
	objs, err := decodeYAML([]byte("---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"))
	if err != nil || len(objs) != 1 {
		t.Errorf("empty documents: %v, %d objects", err, len(objs))
	}
}

func TestGatewayObjects(t *testing.T) {
	t.Parallel()
	objs := gatewayObjects("network-2")
	ns, svc := objs[0], objs[1]
	if ns.GetName() != GatewayNamespace || ns.GetLabels()[NetworkLabel] != "network-2" {
		t.Errorf("namespace %s labels %v", ns.GetName(), ns.GetLabels())
	}
	if svc.GetName() != "istio-eastwestgateway" || svc.GetLabels()[NetworkLabel] != "network-2" {
		t.Errorf("service %s labels %v", svc.GetName(), svc.GetLabels())
	}
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	want := GatewaySelector("network-2")
	if len(sel) != len(want) || sel["istio"] != "eastwestgateway" || sel["app"] != "istio-eastwestgateway" || sel[NetworkLabel] != "network-2" {
		t.Errorf("selector %v, want %v", sel, want)
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	got := map[string]int64{}
	for _, p := range ports {
		m := p.(map[string]any)
		got[m["name"].(string)] = m["port"].(int64)
	}
	wantPorts := map[string]int64{"tcp-hbone": 15008, "tls": 15443, "tcp-istiod": 15012, "tcp-webhook": 15017, "status-port": 15021}
	if len(got) != len(wantPorts) {
		t.Errorf("ports %v, want %v", got, wantPorts)
	}
	for n, p := range wantPorts {
		if got[n] != p {
			t.Errorf("port %s = %d, want %d", n, got[n], p)
		}
	}
}

func TestNormalizeImage(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"meshctl/metallb-controller:v0.15.2": "docker.io/meshctl/metallb-controller:v0.15.2",
		"busybox":                            "docker.io/library/busybox:latest",
		"quay.io/metallb/speaker:v0.15.2":    "quay.io/metallb/speaker:v0.15.2",
		"localhost:5000/x":                   "localhost:5000/x:latest",
		"localhost/x:1":                      "localhost/x:1",
		"a/b@sha256:00":                      "a/b@sha256:00",
	} {
		if got := normalizeImage(in); got != want {
			t.Errorf("normalizeImage(%q) = %q, want %q", in, got, want)
		}
	}
}

// scriptedDocker answers docker commands from a table and records them;
// imports may run concurrently.
type scriptedDocker struct {
	answers map[string]string // argv prefix → stdout; a missing prefix fails
	mu      sync.Mutex
	calls   []string
	loaded  []string // node:archive of each command with stdin
	// imports, when set, is waited on by each command with stdin after
	// marking it Done: every node's import must run at the same time.
	imports *sync.WaitGroup
}

func (d *scriptedDocker) Run(_ context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := strings.Join(args, " ")
	d.mu.Lock()
	d.calls = append(d.calls, cmd)
	if stdin != nil {
		b, _ := io.ReadAll(stdin)
		d.loaded = append(d.loaded, args[2]+":"+string(b))
	}
	d.mu.Unlock()
	if stdin != nil && d.imports != nil {
		d.imports.Done()
		if !waitTimeout(d.imports, 10*time.Second) {
			return nil, errors.New("the other nodes' imports did not start alongside this one")
		}
	}
	if args[0] == "save" {
		return nil, os.WriteFile(args[2], []byte("tar of "+strings.Join(args[3:], " and ")), 0o600)
	}
	for p, out := range d.answers {
		if strings.HasPrefix(cmd, p) {
			return []byte(out), nil
		}
	}
	return nil, io.ErrUnexpectedEOF
}

func TestDockerLoaderLoadsOnlyWhatNodesLack(t *testing.T) {
	t.Parallel()
	d := &scriptedDocker{answers: map[string]string{
		"ps ": "gw-c1-control-plane\ngw-c1-worker\n",
		"image inspect --format {{.Id}} meshctl/":                        "sha256:1",
		"exec gw-c1-control-plane ctr --namespace=k8s.io images list -q": "docker.io/meshctl/metallb-controller:v0.15.2\n",
		"exec gw-c1-worker ctr --namespace=k8s.io images list -q":        "",
		"exec -i ": "",
	}}
	d.imports = &sync.WaitGroup{}
	d.imports.Add(2)
	l := &dockerLoader{docker: d, logger: New(nil).logger}
	defer l.release()
	err := l.LoadImages(context.Background(), "gw-c1", DefaultControllerImage, DefaultSpeakerImage, UpstreamSpeakerImage)
	if err != nil {
		t.Fatal(err)
	}
	// One import per node of what it lacks, the nodes at the same time
	// (d.imports); the upstream image is not in docker: left to the nodes.
	want := []string{
		"gw-c1-control-plane:tar of " + DefaultSpeakerImage,
		"gw-c1-worker:tar of " + DefaultControllerImage + " and " + DefaultSpeakerImage,
	}
	slices.Sort(d.loaded)
	if !slices.Equal(d.loaded, want) {
		t.Errorf("loaded %q, want %q", d.loaded, want)
	}
	for _, c := range d.calls {
		if strings.HasPrefix(c, "exec -i ") && !strings.Contains(c, "ctr --namespace=k8s.io images import --all-platforms --digests") {
			t.Errorf("import %q is not a ctr import into k8s.io", c)
		}
	}
	saves := 0
	for _, c := range d.calls {
		if strings.HasPrefix(c, "save ") {
			saves++
		}
	}
	if saves != 2 {
		t.Errorf("%d docker saves, want one per set of images a node lacks: %q", saves, d.calls)
	}

	// Nodes that lack the same images share one archive.
	same := &scriptedDocker{answers: map[string]string{
		"ps ": "gw-c2-control-plane\ngw-c2-worker\n",
		"image inspect --format {{.Id}} meshctl/": "sha256:1",
		"exec gw-c2-": "",
		"exec -i ":    "",
	}}
	if err := loadOnce(same, "gw-c2", DefaultControllerImage, DefaultSpeakerImage); err != nil {
		t.Fatal(err)
	}
	both := "tar of " + DefaultControllerImage + " and " + DefaultSpeakerImage
	slices.Sort(same.loaded)
	if want := []string{"gw-c2-control-plane:" + both, "gw-c2-worker:" + both}; !slices.Equal(same.loaded, want) {
		t.Errorf("loaded %q, want %q", same.loaded, want)
	}
	if n := len(slices.DeleteFunc(slices.Clone(same.calls), func(c string) bool { return !strings.HasPrefix(c, "save ") })); n != 1 {
		t.Errorf("%d docker saves for two nodes lacking the same images, want 1: %q", n, same.calls)
	}

	// The clusters of an environment, loaded at once by one Install, share
	// one archive; release removes it.
	shared := &scriptedDocker{answers: map[string]string{
		"ps --filter label=io.x-k8s.kind.cluster=gw-c4": "gw-c4-control-plane\n",
		"ps --filter label=io.x-k8s.kind.cluster=gw-c5": "gw-c5-control-plane\n",
		"image inspect --format {{.Id}} meshctl/":       "sha256:1",
		"exec gw-c": "",
		"exec -i ":  "",
	}}
	sl := &dockerLoader{docker: shared, logger: New(nil).logger}
	var wg sync.WaitGroup
	for _, c := range []string{"gw-c4", "gw-c5"} {
		wg.Go(func() {
			if err := sl.LoadImages(context.Background(), c, DefaultControllerImage, DefaultSpeakerImage); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	slices.Sort(shared.loaded)
	if want := []string{"gw-c4-control-plane:" + both, "gw-c5-control-plane:" + both}; !slices.Equal(shared.loaded, want) {
		t.Errorf("loaded %q, want %q", shared.loaded, want)
	}
	if n := len(slices.DeleteFunc(slices.Clone(shared.calls), func(c string) bool { return !strings.HasPrefix(c, "save ") })); n != 1 {
		t.Errorf("%d docker saves for two clusters lacking the same images, want 1: %q", n, shared.calls)
	}
	dir := sl.dir
	sl.release()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("release left %s: %v", dir, err)
	}

	// A failed import names the images and the node.
	failing := &scriptedDocker{answers: map[string]string{
		"ps ": "gw-c3-control-plane\n",
		"image inspect --format {{.Id}} meshctl/": "sha256:1",
		"exec gw-c3-": "",
	}}
	err = loadOnce(failing, "gw-c3", DefaultControllerImage, DefaultSpeakerImage)
	if err == nil || !strings.Contains(err.Error(), "loading "+DefaultControllerImage+", "+DefaultSpeakerImage+" into node gw-c3-control-plane") ||
		!errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("err = %v, want one naming the images and the node, wrapping docker's", err)
	}

	empty := &scriptedDocker{answers: map[string]string{"ps ": ""}}
	err = loadOnce(empty, "gone", "x")
	if err == nil || !strings.Contains(err.Error(), "kind cluster gone has no running node") {
		t.Errorf("err = %v, want a clear error naming the cluster", err)
	}
}

func TestDockerSubnets(t *testing.T) {
	t.Parallel()
	d := &scriptedDocker{answers: map[string]string{"network inspect kind": `[{"Subnet":"172.18.0.0/16","Gateway":"172.18.0.1"},{"Subnet":"fc00:f853:ccd:e793::/64"}]` + "\n"}}
	ps, err := dockerSubnets(context.Background(), d, "kind")
	if err != nil || len(ps) != 2 || ps[1].String() != "fc00:f853:ccd:e793::/64" {
		t.Errorf("got %v, %v", ps, err)
	}
	if _, err := dockerSubnets(context.Background(), &scriptedDocker{}, "nope"); err == nil || !strings.Contains(err.Error(), `docker network "nope"`) {
		t.Errorf("err = %v, want one naming the network", err)
	}
	bad := &scriptedDocker{answers: map[string]string{"network": `[{"Subnet":"bogus"}]`}}
	if _, err := dockerSubnets(context.Background(), bad, "kind"); err == nil || !strings.Contains(err.Error(), `subnet "bogus"`) {
		t.Errorf("err = %v", err)
	}
}

// waitTimeout waits for wg, at most d; false: it timed out.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// loadOnce loads images with a loader of its own, released after.
func loadOnce(d Docker, kindName string, images ...string) error {
	l := &dockerLoader{docker: d, logger: New(nil).logger}
	defer l.release()
	return l.LoadImages(context.Background(), kindName, images...)
}
