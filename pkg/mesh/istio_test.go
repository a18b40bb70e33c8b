package mesh

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/install/istio"
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
