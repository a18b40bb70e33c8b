package mesh

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/internal/testbin"
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
