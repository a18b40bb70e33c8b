package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestPinnedVersionIsBenchs(t *testing.T) {
	v, err := pinnedVersion("../../../bench/go.mod")
	if err != nil || len(v) < 2 || v[0] != 'v' {
		t.Fatalf("pinnedVersion = %q, %v", v, err)
	}
	if _, err := pinnedVersion("main.go"); err == nil {
		t.Error("a file without istio.io/istio gave a version")
	}
}

// TestImageLayout: the images are Istio's Dockerfiles' layout over the
// base, reproducible (same inputs, same ID).
func TestImageLayout(t *testing.T) {
	dir := t.TempDir()
	for _, b := range binaries {
		if err := os.WriteFile(filepath.Join(dir, b.name), []byte("#!"+b.name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	base := filepath.Join(dir, "base.tar")
	ref, _ := name.NewTag("meshctl/busybox:latest")
	baseImg, _ := mutate.AppendLayers(empty.Image)
	if err := tarball.WriteToFile(base, ref, baseImg); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"pilot":       {"usr/local/bin/pilot-discovery", "etc/passwd"},
		"install-cni": {"opt/cni/bin/istio-cni", "usr/local/bin/install-cni"},
	}
	for _, spec := range imageSpecs(dir) {
		img, err := newImage(base, spec, "k")
		if err != nil {
			t.Fatal(err)
		}
		again, _ := newImage(base, spec, "k")
		id1, _ := img.ConfigName()
		id2, _ := again.ConfigName()
		if id1 != id2 {
			t.Errorf("%s: not reproducible (%s, %s)", spec.name, id1, id2)
		}
		cfg, _ := img.ConfigFile()
		switch spec.name {
		case "pilot":
			if cfg.Config.User != "1337:1337" || cfg.Config.Entrypoint[0] != "/usr/local/bin/pilot-discovery" {
				t.Errorf("pilot config %+v", cfg.Config)
			}
		case "install-cni":
			if cfg.Config.Cmd[0] != "/usr/local/bin/install-cni" || cfg.Config.WorkingDir != "/opt/cni/bin" {
				t.Errorf("install-cni config %+v", cfg.Config)
			}
		}
		layers, _ := img.Layers()
		rc, err := layers[len(layers)-1].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		buf.ReadFrom(rc)
		files := map[string]int64{}
		tr := tar.NewReader(&buf)
		for h, err := tr.Next(); err == nil; h, err = tr.Next() {
			files[h.Name] = h.Mode
		}
		for _, f := range want[spec.name] {
			if _, ok := files[f]; !ok {
				t.Errorf("%s lacks %s (has %v)", spec.name, f, files)
			}
		}
	}
}
