package main

import (
	"archive/tar"
	"debug/elf"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
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

// fakeNodeRootfs is a node rootfs laid out as Debian bookworm's (merged
// /usr, update-alternatives, sonames) with synthetic ELF objects.
func fakeNodeRootfs(t *testing.T) string {
	x86, ld := elf.EM_X86_64, "/lib64/ld-linux-x86-64.so.2"
	lib := "usr/lib/x86_64-linux-gnu/"
	entries := []tarEntry{
		{name: "lib", link: "usr/lib"},
		{name: "lib64", link: "usr/lib64"},
		{name: "etc/ld.so.conf", data: []byte("include /etc/ld.so.conf.d/*.conf\n")},
		{name: "etc/ld.so.conf.d/x86_64-linux-gnu.conf", data: []byte("/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")},
		{name: "usr/lib64/ld-linux-x86-64.so.2", link: "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		{name: lib + "ld-linux-x86-64.so.2", data: synthELF(t, x86, "", ""), exec: true},
		{name: lib + "libc.so.6", data: synthELF(t, x86, "", "", "ld-linux-x86-64.so.2")},
		{name: lib + "libxtables.so.12", link: "libxtables.so.12.7.0"},
		{name: lib + "libxtables.so.12.7.0", data: synthELF(t, x86, "", "", "libc.so.6")},
		{name: lib + "libnftables.so.1", link: "libnftables.so.1.1.0"},
		{name: lib + "libnftables.so.1.1.0", data: synthELF(t, x86, "", "", "libxtables.so.12", "libc.so.6")},
		{name: lib + "libsystemd.so.0", data: synthELF(t, x86, "", "", "libc.so.6")},
		{name: lib + "xtables/libxt_mark.so", data: synthELF(t, x86, "", "", "libxtables.so.12", "libc.so.6")},
		{name: "usr/sbin/xtables-nft-multi", data: synthELF(t, x86, ld, "", "libxtables.so.12", "libc.so.6")},
		{name: "usr/sbin/xtables-legacy-multi", data: synthELF(t, x86, ld, "", "libxtables.so.12", "libc.so.6")},
		{name: "usr/sbin/nft", data: synthELF(t, x86, ld, "", "libnftables.so.1", "libc.so.6")},
	}
	for _, family := range []string{"iptables", "ip6tables"} {
		for _, op := range []string{"", "-save", "-restore"} {
			entries = append(entries,
				tarEntry{name: "usr/sbin/" + family + "-legacy" + op, link: "xtables-legacy-multi"},
				tarEntry{name: "usr/sbin/" + family + "-nft" + op, link: "xtables-nft-multi"},
				tarEntry{name: "etc/alternatives/" + family + op, link: "/usr/sbin/" + family + "-nft" + op},
				tarEntry{name: "usr/sbin/" + family + op, link: "/etc/alternatives/" + family + op})
		}
	}
	return writeRootfs(t, entries)
}

// TestImageLayout: the images are Istio's Dockerfiles' layout over the
// base, install-cni over a layer of the node rootfs's netfilter tools,
// reproducible (same inputs, same ID).
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
	wantLayers := map[string]int{"pilot": 1, "install-cni": 2}
	for _, spec := range imageSpecs(dir, fakeNodeRootfs(t)) {
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
		if len(layers) != wantLayers[spec.name] {
			t.Fatalf("%s: %d layers over the empty base, want %d", spec.name, len(layers), wantLayers[spec.name])
		}
		files := layerHeaders(t, layers[len(layers)-1])
		for _, f := range want[spec.name] {
			if _, ok := files[f]; !ok {
				t.Errorf("%s lacks %s (has %v)", spec.name, f, files)
			}
		}
		if spec.name == "install-cni" {
			checkToolsLayer(t, layerHeaders(t, layers[0]))
		}
	}
}

func layerHeaders(t *testing.T, l v1.Layer) map[string]*tar.Header {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %v, want the epoch", h.Name, h.ModTime)
		}
		files[strings.TrimSuffix(h.Name, "/")] = h
	}
	return files
}

// checkToolsLayer: every command Istio execs is in the layer and leads,
// through the layer's own links, to an executable; the loader is at the
// path the binaries name; nothing the commands do not load is there.
func checkToolsLayer(t *testing.T, files map[string]*tar.Header) {
	t.Helper()
	follow := func(p string) *tar.Header {
		for range maxHops {
			h, ok := files[p]
			if !ok || h.Typeflag != tar.TypeSymlink {
				return h
			}
			p = path.Join(path.Dir(p), h.Linkname)
		}
		return nil
	}
	for _, c := range append(netfilterTools().commands, "lib64/ld-linux-x86-64.so.2") {
		if h := follow(c); h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
			t.Errorf("tools layer: %s is not an executable (%+v)", c, h)
		}
	}
	for c, target := range map[string]string{"usr/sbin/iptables": "xtables-nft-multi", "usr/sbin/ip6tables-legacy-save": "xtables-legacy-multi"} {
		if h := files[c]; h == nil || h.Linkname != target {
			t.Errorf("tools layer: %s is %+v, want a link to %s", c, h, target)
		}
	}
	for _, p := range []string{"usr/lib/x86_64-linux-gnu/xtables/libxt_mark.so", "usr/lib/x86_64-linux-gnu/libnftables.so.1.1.0"} {
		if _, ok := files[p]; !ok {
			t.Errorf("tools layer lacks %s", p)
		}
	}
	if h := files["run"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("tools layer: run is %+v, want a directory", h)
	}
	if _, ok := files["usr/lib/x86_64-linux-gnu/libsystemd.so.0"]; ok {
		t.Error("tools layer has libsystemd, which no tool loads")
	}
}

func TestOrNewest(t *testing.T) {
	dir := t.TempDir()
	glob := filepath.Join(dir, "node-*.tar")
	if _, err := orNewest("", glob, "node rootfs tarball", "-rootfs"); err == nil || !strings.Contains(err.Error(), "-rootfs") || !strings.Contains(err.Error(), glob) {
		t.Errorf("no tarball gave %v, want an error naming the glob and the flag", err)
	}
	for i, n := range []string{"node-a.tar", "node-b.tar"} {
		p := filepath.Join(dir, n)
		os.WriteFile(p, nil, 0o644)
		mt := time.Now().Add(time.Duration(i-5) * time.Minute)
		os.Chtimes(p, mt, mt)
	}
	if p, err := orNewest("", glob, "node rootfs tarball", "-rootfs"); err != nil || filepath.Base(p) != "node-b.tar" {
		t.Errorf("orNewest = %s, %v, want node-b.tar", p, err)
	}
	if p, _ := orNewest("/x.tar", glob, "node rootfs tarball", "-rootfs"); p != "/x.tar" {
		t.Errorf("the flag's value was not kept: %s", p)
	}
}
