// Command istio-build builds Istio's components offline for `make e2e-env`,
// from the istio.io/istio module at the one version bench/go.mod pins:
//
//   - pilot-discovery, install-cni (install + node agent), istio-cni (the CNI
//     plugin) and istioctl, in one CGO_ENABLED=0 `go build` of a temporary
//     module that requires only istio.io/istio (so the versions of its
//     dependencies are Istio's own), cached in $CACHE/istio/<version>/bin;
//   - the images meshctl/pilot:<version> and meshctl/install-cni:<version>,
//     laid out as Istio's pilot/docker/Dockerfile.pilot and
//     cni/deployments/kubernetes/Dockerfile.install-cni lay them out, FROM the
//     offline busybox image build-images.sh makes, assembled with
//     go-containerregistry (no Docker build), cached as docker-archives in
//     $CACHE/istio/<version>/images and loaded into the host's Docker;
//   - in install-cni, under Istio's files, a layer of what the ambient node
//     agent execs (iptables, ip6tables, nft: netfilterTools) with exactly
//     their shared libraries and loader, taken from the kind node's Debian
//     rootfs tarball build-rootfs.sh makes, as Istio's own base images ship
//     Debian's (or Wolfi's) iptables and nftables.
//
// Everything is keyed: a rerun with nothing changed stats files and asks
// Docker for two labels. It prints NAME=VALUE lines (images, binaries, the
// charts directory of the module download) for e2e-env's summary.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const module = "istio.io/istio"

// layout versions the image layout below: bump it when newImage changes, so
// cached images are rebuilt. An imageSpec's own layout is bumped instead
// when one image alone changes, so the others keep their IDs.
const layout = "1"

// epoch is every timestamp in the images: same binaries, same image ID.
var epoch = time.Unix(0, 0).UTC()

// binaries are the commands built, by output name.
var binaries = []struct{ name, pkg string }{
	{"pilot-discovery", module + "/pilot/cmd/pilot-discovery"},
	{"install-cni", module + "/cni/cmd/install-cni"},
	{"istio-cni", module + "/cni/cmd/istio-cni"},
	{"istioctl", module + "/istioctl/cmd/istioctl"},
}

func main() {
	cache := os.Getenv("MESHCTL_CACHE")
	if cache == "" {
		cache = "/var/cache/meshctl"
	}
	o := options{}
	flag.StringVar(&o.cache, "cache", cache, "cache directory (MESHCTL_CACHE)")
	flag.StringVar(&o.gomod, "gomod", "bench/go.mod", "go.mod that pins "+module)
	flag.StringVar(&o.base, "base", "", "docker-archive of the base image (default: the newest <cache>/images/meshctl_busybox_latest-*.tar that build-images.sh writes)")
	flag.StringVar(&o.rootfs, "rootfs", "", "the kind node's rootfs tarball, source of install-cni's iptables and nft (default: the newest <cache>/rootfs/node-*.tar that build-rootfs.sh writes)")
	flag.StringVar(&o.hub, "hub", "meshctl", "repository prefix of the images")
	flag.BoolVar(&o.load, "docker-load", true, "load the images into the host's Docker")
	flag.BoolVar(&o.binariesOnly, "binaries-only", false, "build the binaries, not the images")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintf(os.Stderr, "istio-build: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	cache, gomod, base, rootfs, hub string
	load, binariesOnly              bool
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[istio-build %s] %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func run(ctx context.Context, o options) error {
	version, err := pinnedVersion(o.gomod)
	if err != nil {
		return err
	}
	dir := filepath.Join(o.cache, "istio", version)
	bin := filepath.Join(dir, "bin")
	if err := buildBinaries(ctx, o.cache, dir, version); err != nil {
		return err
	}
	modDir, err := moduleDir(ctx, filepath.Join(dir, "src"), version)
	if err != nil {
		return err
	}
	fmt.Printf("ISTIO_VERSION=%s\nISTIO_BIN=%s\nISTIO_CHARTS=%s\n", version, bin, filepath.Join(modDir, "manifests", "charts"))
	if o.binariesOnly {
		return nil
	}
	base, err := orNewest(o.base, filepath.Join(o.cache, "images", "meshctl_busybox_latest-*.tar"), "base image", "-base")
	if err != nil {
		return err
	}
	rootfs, err := orNewest(o.rootfs, filepath.Join(o.cache, "rootfs", "node-*.tar"), "node rootfs tarball", "-rootfs")
	if err != nil {
		return err
	}
	for _, spec := range imageSpecs(bin, rootfs) {
		ref := fmt.Sprintf("%s/%s:%s", o.hub, spec.name, tag(version))
		if err := ensureImage(ctx, dir, ref, base, spec, o.load); err != nil {
			return err
		}
		fmt.Printf("ISTIO_%s_IMAGE=%s\n", strings.ToUpper(strings.ReplaceAll(spec.name, "-", "_")), ref)
	}
	return nil
}

// pinnedVersion reads the version of istio.io/istio that a go.mod requires.
func pinnedVersion(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", fmt.Errorf("reading the pinned Istio version: %w", err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + `\s+(v\S+)`).FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("%s does not require %s", gomod, module)
	}
	return string(m[1]), nil
}

// tag is the image tag of a module version: the version itself, which is a
// valid tag (a pseudo-version has only [0-9a-z.-]).
func tag(version string) string { return version }

// buildKey says what the binaries depend on besides the module: the Go
// toolchain and the flags.
func buildKey(version, goVersion, ldflags string) string {
	return strings.Join([]string{version, goVersion, runtime.GOARCH, ldflags}, "\n")
}

func buildBinaries(ctx context.Context, cache, dir, version string) error {
	bin := filepath.Join(dir, "bin")
	goVersion, err := output(ctx, "", "go", "env", "GOVERSION")
	if err != nil {
		return err
	}
	src := filepath.Join(dir, "src")
	if err := writeModule(src, version); err != nil {
		return err
	}
	modDir, err := moduleDir(ctx, src, version)
	if err != nil {
		return err
	}
	ldflags, err := ldflags(modDir, version)
	if err != nil {
		return err
	}
	key := buildKey(version, goVersion, ldflags)
	if old, err := os.ReadFile(filepath.Join(bin, ".key")); err == nil && string(old) == key && allExist(bin) {
		logf("binaries cached: %s", bin)
		return nil
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	logf("go mod tidy (%s@%s)", module, version)
	if _, err := output(ctx, src, "go", "mod", "tidy"); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, "bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", tmp + "/"}
	for _, b := range binaries {
		args = append(args, b.pkg)
	}
	logf("go %s", strings.Join(args, " "))
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = src, os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod -buildvcs=false")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build of %s@%s: %w", module, version, err)
	}
	st := cmd.ProcessState
	msg := fmt.Sprintf("istio-go-build %s wall %.0fs user %.0fs sys %.0fs", version, time.Since(start).Seconds(), st.UserTime().Seconds(), st.SystemTime().Seconds())
	logf("%s", msg)
	appendTimings(cache, msg)
	for _, b := range binaries {
		if err := os.Rename(filepath.Join(tmp, b.name), filepath.Join(bin, b.name)); err != nil {
			return fmt.Errorf("go build of %s@%s: %w", module, version, err)
		}
	}
	return os.WriteFile(filepath.Join(bin, ".key"), []byte(key), 0o644)
}

func allExist(bin string) bool {
	for _, b := range binaries {
		if fi, err := os.Stat(filepath.Join(bin, b.name)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// writeModule writes the temporary module: istio.io/istio and nothing else
// required, the commands imported by a tools file so `go mod tidy` keeps
// what they need.
func writeModule(src, version string) error {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	gomod := fmt.Sprintf("module meshctl.local/build/istio\n\ngo 1.26\n\nrequire %s %s\n", module, version)
	if old, err := os.ReadFile(filepath.Join(src, "go.mod")); err == nil && bytes.Contains(old, []byte(module+" "+version+"\n")) {
		gomod = string(old) // tidied before: keep its requirements
	}
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
	for _, b := range binaries {
		fmt.Fprintf(&tools, "\t_ %q\n", b.pkg)
	}
	tools.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(src, "tools.go"), []byte(tools.String()), 0o644)
}

// moduleDir is the module download's directory (charts, VERSION file).
func moduleDir(ctx context.Context, src, version string) (string, error) {
	out, err := output(ctx, src, "go", "mod", "download", "-json", module+"@"+version)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`"Dir":\s*"([^"]+)"`).FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("go mod download %s@%s: no Dir in %s", module, version, out)
	}
	return m[1], nil
}

// ldflags strip the binaries and give them a version as Istio's Makefile
// does: <VERSION file>-dev, the commit of the pseudo-version.
func ldflags(modDir, version string) (string, error) {
	v, err := os.ReadFile(filepath.Join(modDir, "VERSION"))
	if err != nil {
		return "", fmt.Errorf("reading Istio's VERSION file: %w", err)
	}
	rev := version
	if i := strings.LastIndexByte(version, '-'); i >= 0 {
		rev = version[i+1:]
	}
	p := module + "/pkg/version."
	flags := []string{"-s", "-w",
		"-X", p + "buildVersion=" + strings.TrimSpace(string(v)) + "-dev",
		"-X", p + "buildGitRevision=" + rev,
		"-X", p + "buildStatus=Clean",
		"-X", p + "buildTag=" + version,
		"-X", p + "buildHub=meshctl",
		"-X", p + "buildOS=linux",
		"-X", p + "buildArch=" + runtime.GOARCH,
	}
	return strings.Join(flags, " "), nil
}

func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod -buildvcs=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func appendTimings(cache, msg string) {
	f, err := os.OpenFile(filepath.Join(cache, "timings.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339), msg)
}

// orNewest is flagValue if set, else the newest file matching glob, which
// make e2e-env writes.
func orNewest(flagValue, glob, what, flagName string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	p, err := newest(glob)
	if err != nil {
		return "", fmt.Errorf("no %s %s: make e2e-env builds it, or pass %s", what, glob, flagName)
	}
	return p, nil
}

func newest(glob string) (string, error) {
	ms, _ := filepath.Glob(glob)
	var best string
	var bestT time.Time
	for _, m := range ms {
		if fi, err := os.Stat(m); err == nil && fi.ModTime().After(bestT) {
			best, bestT = m, fi.ModTime()
		}
	}
	if best == "" {
		return "", fmt.Errorf("nothing matches %s", glob)
	}
	return best, nil
}

// file is one file of an image's own layer.
type file struct {
	path string // in the image, no leading slash
	src  string // host file, or
	data []byte // content, or
	link string // a symlink's target, or
	dir  bool   // an empty directory
	mode int64
}

type imageSpec struct {
	name   string
	layout string // this image's own layout version, see layout
	// tools, if any, are taken from the rootfs tarball into a layer under
	// files.
	tools  *toolSet
	rootfs string
	files  []file
	config v1.Config
}

// users: Istio's base image has istio-proxy as 1337.
var passwd = "root:x:0:0:root:/root:/bin/sh\nistio-proxy:x:1337:1337::/home/istio-proxy:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
var group = "root:x:0:\nistio-proxy:x:1337:\nnogroup:x:65534:\n"

// imageSpecs are Istio's Dockerfiles, as files and config; rootfs is the
// node rootfs tarball install-cni's netfilter tools come from.
func imageSpecs(bin, rootfs string) []imageSpec {
	tools := netfilterTools()
	users := []file{{path: "etc/passwd", data: []byte(passwd), mode: 0o644}, {path: "etc/group", data: []byte(group), mode: 0o644}}
	return []imageSpec{
		{
			// pilot/docker/Dockerfile.pilot
			name: "pilot",
			files: append([]file{
				{path: "usr/local/bin/pilot-discovery", src: filepath.Join(bin, "pilot-discovery"), mode: 0o755},
			}, users...),
			config: v1.Config{
				User:       "1337:1337",
				Entrypoint: []string{"/usr/local/bin/pilot-discovery"},
				Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
				WorkingDir: "/",
			},
		},
		{
			// cni/deployments/kubernetes/Dockerfile.install-cni, over the
			// iptables and nftables its base images have
			name:   "install-cni",
			layout: "2",
			tools:  &tools,
			rootfs: rootfs,
			files: append([]file{
				{path: "opt/cni/bin/istio-cni", src: filepath.Join(bin, "istio-cni"), mode: 0o755},
				{path: "usr/local/bin/install-cni", src: filepath.Join(bin, "install-cni"), mode: 0o755},
			}, users...),
			config: v1.Config{
				Cmd:        []string{"/usr/local/bin/install-cni"},
				Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/cni/bin"},
				WorkingDir: "/opt/cni/bin",
				Labels:     map[string]string{"description": "Istio CNI plugin installer."},
			},
		},
	}
}

// imageKey identifies an image's inputs by name, size and mtime, so a warm
// check reads no file.
func imageKey(ref, base string, spec imageSpec) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", layout, ref)
	inputs := []string{base}
	if spec.layout != "" {
		fmt.Fprintf(h, "layout %s\n", spec.layout)
	}
	if spec.tools != nil {
		fmt.Fprintf(h, "tools %s\n", spec.tools.key())
		inputs = append(inputs, spec.rootfs)
	}
	for _, p := range inputs {
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
	}
	for _, f := range spec.files {
		if f.src == "" {
			fmt.Fprintf(h, "%s %x\n", f.path, sha256.Sum256(f.data))
			continue
		}
		fi, err := os.Stat(f.src)
		if err != nil {
			return "", fmt.Errorf("image %s: %w", ref, err)
		}
		fmt.Fprintf(h, "%s %s %d %d\n", f.path, f.src, fi.Size(), fi.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// ensureImage writes the image's docker-archive unless its key's archive
// exists, and loads it into Docker unless Docker has that key.
func ensureImage(ctx context.Context, dir, ref, base string, spec imageSpec, load bool) error {
	key, err := imageKey(ref, base, spec)
	if err != nil {
		return err
	}
	imgDir := filepath.Join(dir, "images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	archive := filepath.Join(imgDir, spec.name+"-"+key+".tar")
	if _, err := os.Stat(archive); err == nil {
		logf("image cached: %s (%s)", ref, archive)
	} else {
		start := time.Now()
		img, err := newImage(base, spec, key)
		if err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		tagRef, err := name.NewTag(ref)
		if err != nil {
			return err
		}
		if err := tarball.WriteToFile(archive+".tmp", tagRef, img); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		if err := os.Rename(archive+".tmp", archive); err != nil {
			return err
		}
		old, _ := filepath.Glob(filepath.Join(imgDir, spec.name+"-*.tar"))
		for _, o := range old {
			if o != archive {
				os.Remove(o)
			}
		}
		fi, _ := os.Stat(archive)
		logf("image built: %s (%d MB archive, %.1fs)", ref, fi.Size()>>20, time.Since(start).Seconds())
	}
	if !load {
		return nil
	}
	if have, _ := output(ctx, "", "docker", "image", "inspect", "-f", `{{ index .Config.Labels "meshctl.key" }}`, ref); have == key {
		logf("image in docker: %s", ref)
		return nil
	}
	if _, err := output(ctx, "", "docker", "load", "-i", archive); err != nil {
		return fmt.Errorf("loading %s into docker: %w", ref, err)
	}
	logf("image loaded into docker: %s", ref)
	return nil
}

// newImage is base plus a layer of spec's tools if any, then one of spec's
// files, with spec's config (the base's entrypoint, env and labels go:
// Istio's images set their own).
func newImage(base string, spec imageSpec, key string) (v1.Image, error) {
	img, err := tarball.ImageFromPath(base, nil)
	if err != nil {
		return nil, fmt.Errorf("base image %s: %w", base, err)
	}
	if spec.tools != nil {
		files, err := spec.tools.layerFiles(spec.rootfs)
		if err != nil {
			return nil, err
		}
		if img, err = appendLayer(img, files, "netfilter tools from "+filepath.Base(spec.rootfs)); err != nil {
			return nil, err
		}
	}
	if img, err = appendLayer(img, spec.files, spec.name); err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: epoch}
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = spec.config
	labels := map[string]string{"meshctl.key": key, "org.opencontainers.image.source": "https://github.com/istio/istio"}
	for k, v := range spec.config.Labels {
		labels[k] = v
	}
	cfg.Config.Labels = labels
	return mutate.ConfigFile(img, cfg)
}

func appendLayer(img v1.Image, files []file, what string) (v1.Image, error) {
	layer, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:   static.NewLayer(layer, types.DockerLayer),
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "meshctl hack/e2e/istio-build: " + what},
	})
}

// layerTar is a layer of files: parent directories, then the files in the
// order given, every header fixed so the digest depends only on the content.
func layerTar(files []file) ([]byte, error) {
	dirs := map[string]bool{}
	for _, f := range files {
		for d := filepath.Dir(f.path); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
		if f.dir {
			dirs[f.path] = true
		}
	}
	var sorted []string
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range sorted {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if f.dir {
			continue
		}
		if f.link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: f.path, Linkname: f.link, Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
			continue
		}
		data := f.data
		if f.src != "" {
			var err error
			if data, err = os.ReadFile(f.src); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: f.mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, bytes.NewReader(data)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
