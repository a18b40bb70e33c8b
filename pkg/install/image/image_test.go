package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/meshctl/meshctl/internal/testbin"
)

// staticBinary builds a tiny static Linux program that prints its argv[0]
// and arguments: real input for New, runnable in the image.
func staticBinary(t *testing.T) string { return staticBinaryNamed(t, "meshctl") }

// staticBinaryNamed is staticBinary under another file name (New names the
// file in the image after the kind of binary it is) and with its own
// content, as two builds of two commands have.
func staticBinaryNamed(t *testing.T, name string) string {
	return testbin.Static(t, name, `package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// `+name+`
func main() { fmt.Println("hello from", filepath.Base(os.Args[0]), os.Args[1:]) }
`)
}

// TestImageContent checks the image of each kind of binary: meshctl
// itself at /usr/local/bin/meshctl, meshctl-dataplane at
// /usr/local/bin/meshctl-dataplane, each the entrypoint, with meshctl-cni a
// symlink to it, in one reproducible gzipped layer.
func TestImageContent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, entrypoint string }{
		{"meshctl", BinaryPath},
		{"meshctl-dataplane", DataplaneBinaryPath},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bin := staticBinaryNamed(t, tt.name)
			testImageContent(t, bin, tt.entrypoint)
		})
	}
}

func testImageContent(t *testing.T, bin, entrypoint string) {
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	img, err := New(WithBinary(bin), WithTag("v1.2.3-dirty"))
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Ref(); got != "meshctl/dataplane:v1.2.3-dirty" {
		t.Errorf("Ref() = %q", got)
	}
	if img.Entrypoint() != entrypoint || img.Notice() != "" {
		t.Errorf("Entrypoint() = %q, Notice() = %q; want %q and no notice (the binary was given)", img.Entrypoint(), img.Notice(), entrypoint)
	}
	// The ID needs no compression: a rerun whose nodes hold the image
	// (Missing) never pays for it. It is the ID go-containerregistry gives.
	id, err := img.ID()
	if err != nil {
		t.Fatal(err)
	}
	img.Missing(context.Background(), &recorder{calls: map[string][]byte{}}, Node{Cluster: "c", Name: "n"})
	if img.layer.gz != nil {
		t.Error("the layer was compressed before anything needed it")
	}
	v1img, err := img.V1()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := v1img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	if name, err := v1img.ConfigName(); err != nil || name.String() != id {
		t.Errorf("ID() = %s, go-containerregistry's config digest %s (%v)", id, name, err)
	}
	if mt, _ := layers[0].MediaType(); mt != types.DockerLayer {
		t.Errorf("layer media type %s, want %s", mt, types.DockerLayer)
	}
	compressed, _ := layers[0].Size()
	if compressed <= 0 || compressed >= int64(len(want)) {
		t.Errorf("compressed layer of %d bytes for a binary of %d", compressed, len(want))
	}
	// The digests the archive and the config carry are those of the bytes.
	for _, c := range []struct {
		what string
		open func() (io.ReadCloser, error)
		hash func() (v1.Hash, error)
	}{{"digest", layers[0].Compressed, layers[0].Digest}, {"diff ID", layers[0].Uncompressed, layers[0].DiffID}} {
		rc, err := c.open()
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := v1.SHA256(rc)
		rc.Close()
		if h, _ := c.hash(); err != nil || got != h {
			t.Errorf("layer %s %s, its bytes hash to %s (%v)", c.what, h, got, err)
		}
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	file := strings.TrimPrefix(entrypoint, "/")
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		if h.Name == file {
			got, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the image's %s differs from the binary", entrypoint)
			}
		}
	}
	if len(files) != 6 {
		t.Errorf("layer holds %d entries, want 6: %v", len(files), slices.Sorted(maps.Keys(files)))
	}
	bh := files[file]
	if bh == nil || bh.Mode != 0o755 || bh.Typeflag != tar.TypeReg {
		t.Errorf("binary header %+v", bh)
	}
	if h := files["usr/local/bin/meshctl-cni"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != path.Base(entrypoint) {
		t.Errorf("meshctl-cni header %+v, want a symlink to %s", h, path.Base(entrypoint))
	}
	if h := files["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp/ header %+v", h)
	}
	for n, h := range files {
		if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mtime %v uid %d gid %d: not reproducible", n, h.ModTime, h.Uid, h.Gid)
		}
	}

	cfg, err := v1img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != entrypoint || len(cfg.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want %s", cfg.Config.Entrypoint, cfg.Config.Cmd, entrypoint)
	}
	if !cfg.Created.Time.Equal(epoch) {
		t.Errorf("created %v", cfg.Created)
	}
	if diffID, _ := layers[0].DiffID(); len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != diffID {
		t.Errorf("rootfs diff IDs %v, want the layer's %s", cfg.RootFS.DiffIDs, diffID)
	}

	// Same binary, same image: what makes a re-install a no-op.
	again, err := New(WithBinary(bin), WithTag("v1.2.3-dirty"))
	if err != nil {
		t.Fatal(err)
	}
	id1, _ := img.ID()
	id2, _ := again.ID()
	if id1 == "" || id1 != id2 {
		t.Errorf("image IDs %q and %q: the build is not reproducible", id1, id2)
	}
	againImg, err := again.V1()
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := v1img.Digest()
	d2, _ := againImg.Digest()
	if d1 != d2 {
		t.Errorf("manifest digests %s and %s: the compressed layer is not reproducible", d1, d2)
	}
}

// TestImageIDFollowsBinary: another binary under the same tag is another
// image ID, so Missing finds the nodes holding the old one and Load
// replaces it, and the charts' image-id annotation rolls the Pods.
func TestImageIDFollowsBinary(t *testing.T) {
	t.Parallel()
	a, err := New(WithBinary(staticBinaryNamed(t, "meshctl")), WithTag("same"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(WithBinary(staticBinaryNamed(t, "meshctl-dataplane")), WithTag("same"))
	if err != nil {
		t.Fatal(err)
	}
	ida, _ := a.ID()
	idb, _ := b.ID()
	if a.Ref() != b.Ref() || ida == idb {
		t.Errorf("refs %s, %s with IDs %s, %s: want one ref, two IDs", a.Ref(), b.Ref(), ida, idb)
	}
	r := &recorder{calls: map[string][]byte{}}
	b.Missing(context.Background(), r, Node{Cluster: "c1", Name: "c1-control-plane"})
	if n := len(r.argv); n < 1 || r.argv[n-1] != idb {
		t.Errorf("Missing checked %q, want the new binary's image ID %s", r.argv, idb)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, binary, want string
	}{
		{"missing", filepath.Join(t.TempDir(), "nope"), "not a Linux executable"},
		{"script", text, "not a Linux executable"},
	}
	// A real dynamically linked executable, where the system has one.
	for _, p := range []string{"/bin/ls", "/usr/bin/env"} {
		if f, err := os.Stat(p); err == nil && f.Mode().IsRegular() {
			tests = append(tests, struct{ name, binary, want string }{"dynamic", p, "CGO_ENABLED=0"})
			break
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(WithBinary(tt.binary))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.binary) {
				t.Fatalf("New(%s) = %v, want an error naming the file and saying %q", tt.binary, err, tt.want)
			}
		})
	}
	if _, err := New(WithBinary(text), WithRepository("UPPER/case")); err == nil || !strings.Contains(err.Error(), "UPPER/case") {
		t.Errorf("bad repository: %v", err)
	}
}

func TestTag(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"v0.1.0": "v0.1.0", "dev": "dev", "v1.0.0+abc": "v1.0.0-abc", "e60da23-dirty": "e60da23-dirty",
		"": "dev", "-x": "x", strings.Repeat("a", 200): strings.Repeat("a", 128),
	} {
		if got := Tag(in); got != want {
			t.Errorf("Tag(%q) = %q, want %q", in, got, want)
		}
	}
}

type recorder struct {
	mu    sync.Mutex
	calls map[string][]byte
	argv  []string
	fail  map[string]bool
}

func (r *recorder) Exec(_ context.Context, kindName, node string, stdin []byte, argv ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[kindName+"/"+node] = stdin
	r.argv = argv
	if r.fail[node] {
		return errors.New("ctr: boom")
	}
	return nil
}

func TestLoad(t *testing.T) {
	t.Parallel()
	img, err := New(WithBinary(staticBinary(t)), WithTag("test"))
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{calls: map[string][]byte{}, fail: map[string]bool{"c2-control-plane": true}}
	err = img.Load(context.Background(), r,
		Node{Cluster: "c1", Name: "c1-control-plane"}, Node{Cluster: "c1", Name: "c1-worker"}, Node{Cluster: "c2", Name: "c2-control-plane"})
	if err == nil || !strings.Contains(err.Error(), "node c2-control-plane of cluster c2") || strings.Contains(err.Error(), "c1-worker") {
		t.Fatalf("Load error %v, want only c2-control-plane's failure, named", err)
	}
	if len(r.calls) != 3 {
		t.Fatalf("exec'd on %d nodes, want 3", len(r.calls))
	}
	if got := strings.Join(r.argv, " "); !strings.Contains(got, "ctr --namespace=k8s.io images import") || !strings.HasSuffix(got, " -") {
		t.Errorf("argv %q", got)
	}
	// What each node received is a docker-archive holding exactly this image.
	want, _ := img.ID()
	for n, archive := range r.calls {
		got, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(archive)), nil }, nil)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if id, _ := got.ConfigName(); id.String() != want {
			t.Errorf("%s got image %s, want %s", n, id, want)
		}
	}
}

func TestContainerdRef(t *testing.T) {
	t.Parallel()
	bin := staticBinary(t)
	for _, tt := range []struct {
		opts []Option
		want string
	}{
		{nil, "docker.io/meshctl/dataplane:v1"},
		{[]Option{WithRepository("dataplane")}, "docker.io/library/dataplane:v1"},
		{[]Option{WithRegistry("localhost:5001")}, "localhost:5001/meshctl/dataplane:v1"},
		{[]Option{WithRegistry("ghcr.io/me")}, "ghcr.io/me/meshctl/dataplane:v1"},
		{[]Option{WithRegistry("index.docker.io/me")}, "docker.io/me/meshctl/dataplane:v1"},
	} {
		img, err := New(append([]Option{WithBinary(bin), WithTag("v1")}, tt.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if got := img.ContainerdRef(); got != tt.want {
			t.Errorf("ContainerdRef of %s = %q, want %q", img.Ref(), got, tt.want)
		}
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	img, err := New(WithBinary(staticBinary(t)), WithTag("test"))
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{calls: map[string][]byte{}, fail: map[string]bool{"c1-worker": true}}
	err = img.Remove(context.Background(), r,
		Node{Cluster: "c1", Name: "c1-control-plane"}, Node{Cluster: "c1", Name: "c1-worker"}, Node{Cluster: "c2", Name: "c2-control-plane"})
	if err == nil || !strings.Contains(err.Error(), "removing docker.io/meshctl/dataplane:test from node c1-worker of cluster c1: ctr: boom") ||
		strings.Contains(err.Error(), "control-plane") {
		t.Fatalf("Remove error %v, want only c1-worker's failure, named", err)
	}
	if len(r.calls) != 3 {
		t.Fatalf("exec'd on %d nodes, want 3", len(r.calls))
	}
	id, _ := img.ID()
	if want := []string{"sh", "-c", removeScript, "sh", "docker.io/meshctl/dataplane:test", id}; strings.Join(r.argv, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("argv %q", r.argv)
	}
}

// removeScript run by a real shell and awk against a stand-in ctr that lists
// what a node's containerd holds after Load and a Pod: the tag, the import's
// digest alias, the CRI's ID name — beside images that must stay: digest
// aliases and tags of other content, and (second listing) another tag of the
// same content, which keeps the ID name too.
func TestRemoveScript(t *testing.T) {
	t.Parallel()
	const (
		ours   = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
		id     = "sha256:3333333333333333333333333333333333333333333333333333333333333333"
		theirs = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	)
	line := func(name, digest string) string {
		return name + "   application/vnd.docker.distribution.manifest.v2+json " + digest + " 40.1 MiB linux/amd64 io.cri-containerd.image=managed\n"
	}
	header := "REF   TYPE   DIGEST   SIZE   PLATFORMS   LABELS\n"
	node := header + line("docker.io/meshctl/dataplane:v1", ours) + line("import-2026-12-03@"+ours, ours) + line(id, ours) +
		line("import-2026-12-01@"+theirs, theirs) + line("docker.io/meshctl/dataplane:v0", theirs) + line("registry.k8s.io/pause:3.10.1", theirs)
	sharing := node + line("localhost:5001/meshctl/dataplane:v1", ours)

	dir := t.TempDir()
	ctr := `#!/bin/sh
[ "$1" = --namespace=k8s.io ] || { echo "ctr: wrong namespace $1" >&2; exit 2; }
case "$2 $3" in
"images ls") cat "$(dirname "$0")/listing" ;;
"images rm") shift 3; echo "$@" >>"$(dirname "$0")/removed" ;;
*) echo "ctr: unexpected $*" >&2; exit 2 ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "ctr"), []byte(ctr), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(listing, ref string) string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "listing"), []byte(listing), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.Remove(filepath.Join(dir, "removed"))
		cmd := exec.Command("sh", "-c", removeScript, "sh", ref, id)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("removeScript %s: %v: %s", ref, err, out)
		}
		removed, err := os.ReadFile(filepath.Join(dir, "removed"))
		if errors.Is(err, os.ErrNotExist) {
			return "(nothing)"
		}
		if err != nil {
			t.Fatal(err)
		}
		names := strings.Fields(string(removed))
		sort.Strings(names)
		return strings.Join(names, " ")
	}
	// (sorted: "d" < "i" < "s")
	if got, want := run(node, "docker.io/meshctl/dataplane:v1"), "docker.io/meshctl/dataplane:v1 import-2026-12-03@"+ours+" "+id; got != want {
		t.Errorf("removed %s, want %s", got, want)
	}
	if got, want := run(sharing, "docker.io/meshctl/dataplane:v1"), "docker.io/meshctl/dataplane:v1 import-2026-12-03@"+ours; got != want {
		t.Errorf("with another tag of the same content: removed %s, want %s", got, want)
	}
	if got := run(node, "docker.io/meshctl/dataplane:v2"); got != "(nothing)" {
		t.Errorf("an image that is not there: removed %s, want nothing", got)
	}
}

// TestIntegrationDockerRun loads the image into the local Docker engine and
// runs it: the entrypoint, the binary and the meshctl-cni name all work in a
// real container runtime.
func TestIntegrationDockerRun(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: runs a container")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skip("no Docker engine answers:", err)
	}
	for _, name := range []string{"meshctl", "meshctl-dataplane"} {
		t.Run(name, func(t *testing.T) { testDockerRun(t, staticBinaryNamed(t, name)) })
	}
}

func testDockerRun(t *testing.T, bin string) {
	img, err := New(WithBinary(bin), WithRepository("meshctl-test/dataplane"), WithTag(filepath.Base(t.TempDir())))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := img.WriteTarball(&buf); err != nil {
		t.Fatal(err)
	}
	load := exec.Command("docker", "load")
	load.Stdin = &buf
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("docker load: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", img.Ref()).Run() })
	out, err := exec.Command("docker", "run", "--rm", "--network=none", img.Ref(), "dataplane", "proxy").CombinedOutput()
	if want := "hello from " + filepath.Base(bin) + " [dataplane proxy]"; err != nil || strings.TrimSpace(string(out)) != want {
		t.Errorf("docker run %s: %v: %q", img.Ref(), err, out)
	}
	out, err = exec.Command("docker", "run", "--rm", "--network=none", "--entrypoint", CNIPath, img.Ref()).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hello from meshctl-cni []" {
		t.Errorf("docker run --entrypoint %s: %v: %q", CNIPath, err, out)
	}
	inspect, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", img.Ref()).Output()
	if id, _ := img.ID(); err != nil || strings.TrimSpace(string(inspect)) != id {
		t.Errorf("docker's image ID %q (%v), want %s", inspect, err, id)
	}
}

func TestRegistryNames(t *testing.T) {
	t.Parallel()
	bin := staticBinary(t)
	for reg, want := range map[string]string{
		"localhost:5001":       "localhost:5001/meshctl/dataplane",
		"ghcr.io/me/":          "ghcr.io/me/meshctl/dataplane",
		"10.0.0.7:5000/mirror": "10.0.0.7:5000/mirror/meshctl/dataplane",
	} {
		img, err := New(WithBinary(bin), WithRegistry(reg), WithTag("v1"))
		if err != nil {
			t.Fatalf("WithRegistry(%q): %v", reg, err)
		}
		if img.Repository() != want || img.Ref() != want+":v1" {
			t.Errorf("WithRegistry(%q): repository %q, ref %q; want %q", reg, img.Repository(), img.Ref(), want)
		}
	}
	for _, reg := range []string{"myregistry", "Bad Host:5000"} {
		if _, err := New(WithBinary(bin), WithRegistry(reg)); err == nil || !strings.Contains(err.Error(), "registry") {
			t.Errorf("WithRegistry(%q) = %v, want an error about the registry", reg, err)
		}
	}
	if _, err := (&Image{}).Push(context.Background()); err == nil {
		t.Error("Push without a registry succeeded")
	}
}

// TestPush pushes to go-containerregistry's registry (the distribution API,
// in process, on loopback) and pulls the image back by the digest Push
// returned.
func TestPush(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(registry.New(registry.Logger(stdlog.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := New(WithBinary(staticBinary(t)), WithRegistry(host+"/team"), WithTag("v9"))
	if err != nil {
		t.Fatal(err)
	}
	byDigest, err := img.Push(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(byDigest, host+"/team/meshctl/dataplane@sha256:") {
		t.Fatalf("Push = %q", byDigest)
	}
	for _, ref := range []string{byDigest, img.Ref()} {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		pulled, err := remote.Image(r)
		if err != nil {
			t.Fatalf("pulling %s: %v", ref, err)
		}
		got, _ := pulled.ConfigName()
		if id, _ := img.ID(); got.String() != id {
			t.Errorf("%s: config %s, pushed %s", ref, got, id)
		}
	}
	// Pushing again is a no-op that returns the same digest.
	again, err := img.Push(context.Background())
	if err != nil || again != byDigest {
		t.Errorf("second push = %q, %v; want %q", again, err, byDigest)
	}
}

// TestIntegrationPushToRegistryContainer pushes to the registry image the
// e2e environment builds (distribution v3, as `meshctl up --registry` runs
// it), then has Docker pull and run what was pushed.
func TestIntegrationPushToRegistryContainer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: runs a registry container")
	}
	regImage := "meshctl/registry:v3.0.0"
	if err := exec.Command("docker", "image", "inspect", regImage).Run(); err != nil {
		t.Skipf("no Docker engine or no %s (make e2e-env): %v", regImage, err)
	}
	name := "meshctl-test-registry-" + filepath.Base(t.TempDir())
	out, err := exec.Command("docker", "run", "-d", "--name", name, "-p", "127.0.0.1::5000", regImage).CombinedOutput()
	if err != nil {
		t.Fatalf("docker run %s: %v\n%s", regImage, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	port, err := exec.Command("docker", "port", name, "5000/tcp").Output()
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimSpace(strings.Split(string(port), "\n")[0]) // 127.0.0.1:NNNNN
	img, err := New(WithBinary(staticBinary(t)), WithRegistry(host), WithTag("push"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var byDigest string
	for { // the registry takes a moment to listen
		if byDigest, err = img.Push(ctx); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", byDigest, img.Ref()).Run() })
	if out, err := exec.Command("docker", "pull", img.Ref()).CombinedOutput(); err != nil {
		t.Fatalf("docker pull %s: %v\n%s", img.Ref(), err, out)
	}
	out, err = exec.Command("docker", "run", "--rm", "--network=none", byDigest, "pushed").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hello from meshctl [pushed]" {
		t.Errorf("docker run %s: %v: %q", byDigest, err, out)
	}
}

// Missing asks each node whether its containerd holds this very image (name
// and ID); the nodes whose answer is no, or whose check fails, are missing it.
func TestMissing(t *testing.T) {
	t.Parallel()
	img, err := New(WithBinary(staticBinary(t)), WithTag("test"))
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{calls: map[string][]byte{}, fail: map[string]bool{"c1-worker": true, "c2-control-plane": true}}
	nodes := []Node{{Cluster: "c1", Name: "c1-control-plane"}, {Cluster: "c1", Name: "c1-worker"}, {Cluster: "c2", Name: "c2-control-plane"}}
	got := img.Missing(context.Background(), r, nodes...)
	if want := nodes[1:]; !slices.Equal(got, want) {
		t.Errorf("Missing = %v, want %v", got, want)
	}
	if len(r.calls) != 3 {
		t.Errorf("checked %d nodes, want 3", len(r.calls))
	}
	id, _ := img.ID()
	if n := len(r.argv); n < 2 || r.argv[n-2] != "docker.io/meshctl/dataplane:test" || r.argv[n-1] != id {
		t.Errorf("argv %q, want the containerd name and the image ID last", r.argv)
	}
}

// TestFromArchive: an image saved by Docker (Istio's pilot, say) side-loads
// under its own name with its own ID, exactly as saved.
func TestFromArchive(t *testing.T) {
	t.Parallel()
	src, err := New(WithBinary(staticBinary(t)), WithRepository("other/name"), WithTag("x"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "saved.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.WriteTarball(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	img, err := FromArchive(path, "meshctl/pilot:v0.0.0-1-abc")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := src.ID()
	if id, _ := img.ID(); id != want {
		t.Errorf("ID %s, want the saved image's %s", id, want)
	}
	if img.Ref() != "meshctl/pilot:v0.0.0-1-abc" || img.ContainerdRef() != "docker.io/meshctl/pilot:v0.0.0-1-abc" || img.Architecture() != runtime.GOARCH {
		t.Errorf("Ref %s ContainerdRef %s arch %s", img.Ref(), img.ContainerdRef(), img.Architecture())
	}
	r := &recorder{calls: map[string][]byte{}, fail: map[string]bool{}}
	if err := img.Load(context.Background(), r, Node{Cluster: "c1", Name: "c1-control-plane"}); err != nil {
		t.Fatal(err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(r.calls["c1/c1-control-plane"])), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != "meshctl/pilot:v0.0.0-1-abc" {
		t.Errorf("the node got tags %+v, want meshctl/pilot:v0.0.0-1-abc", m)
	}
	// Under the name Docker saved it by, the archive goes to the node as it
	// is (written again, every uncompressed layer would be gzipped).
	path = dockerSaved(t, src, "other/name:x")
	same, err := FromArchive(path, "other/name:x")
	if err != nil {
		t.Fatal(err)
	}
	if err := same.Load(context.Background(), r, Node{Cluster: "c1", Name: "c1-worker"}); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.calls["c1/c1-worker"], saved) {
		t.Errorf("the node got %d bytes, not the %d-byte archive as saved", len(r.calls["c1/c1-worker"]), len(saved))
	}
	if _, err := FromArchive(filepath.Join(t.TempDir(), "absent.tar"), "meshctl/pilot:x"); err == nil || !strings.Contains(err.Error(), "meshctl/pilot:x") {
		t.Errorf("absent archive: %v", err)
	}
}

// TestFromArchiveOfSeveral: from an archive of several images (one
// `docker save a b`), FromArchive reads the one tagged ref, and refuses a
// ref the archive does not hold, naming it.
func TestFromArchiveOfSeveral(t *testing.T) {
	t.Parallel()
	refs := []string{"meshctl/pilot:v1", "meshctl/install-cni:v1"}
	path, ids := savedImages(t, refs...)
	for k, ref := range refs {
		img, err := FromArchive(path, ref)
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := img.ID(); id != ids[k] {
			t.Errorf("%s: ID %s, want %s", ref, id, ids[k])
		}
		if img.Ref() != ref || img.ContainerdRef() != "docker.io/"+ref {
			t.Errorf("%s: Ref %s ContainerdRef %s", ref, img.Ref(), img.ContainerdRef())
		}
	}
	if _, err := FromArchive(path, "meshctl/ztunnel:v1"); err == nil || !strings.Contains(err.Error(), "meshctl/ztunnel:v1") {
		t.Errorf("a ref the archive lacks: %v", err)
	}
}

// savedImages writes a docker-archive of one small random image per ref,
// as `docker save refs...` does, and returns it with the images' IDs.
func savedImages(t *testing.T, refs ...string) (string, []string) {
	t.Helper()
	m := map[name.Reference]v1.Image{}
	var ids []string
	for _, ref := range refs {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		id, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id.String())
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		m[tag] = img
	}
	path := filepath.Join(t.TempDir(), "saved.tar")
	if err := tarball.MultiRefWriteToFile(path, m); err != nil {
		t.Fatal(err)
	}
	return path, ids
}

// importRecorder records each node's imports; with started set, each
// import marks it Done and waits for the others, failing unless every
// node's import runs at the same time.
type importRecorder struct {
	mu      sync.Mutex
	imports map[string][]string // cluster/node → stdin of each exec
	argv    [][]string
	fail    map[string]bool
	started *sync.WaitGroup
}

func (r *importRecorder) Exec(_ context.Context, kindName, node string, stdin []byte, argv ...string) error {
	r.mu.Lock()
	r.imports[kindName+"/"+node] = append(r.imports[kindName+"/"+node], string(stdin))
	r.argv = append(r.argv, argv)
	r.mu.Unlock()
	if r.started != nil {
		r.started.Done()
		done := make(chan struct{})
		go func() { r.started.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			return errors.New("the other nodes' imports did not start alongside this one")
		}
	}
	if r.fail[node] {
		return errors.New("ctr: boom")
	}
	return nil
}

// TestLoadArchives: each node gets its images in one import, from one
// archive per distinct set of images, saved once for every node wanting
// that set, all nodes at the same time; a node wanting nothing is left
// alone; a failed import names the images, the node and its cluster, and
// the other nodes are loaded all the same; a failed save loads nothing.
func TestLoadArchives(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var saves []string
	save := func(_ context.Context, refs []string) (string, error) {
		saves = append(saves, strings.Join(refs, " "))
		path := filepath.Join(dir, fmt.Sprintf("%d.tar", len(saves)))
		return path, os.WriteFile(path, []byte("archive of "+strings.Join(refs, " and ")), 0o600)
	}
	cp1, w1 := Node{Cluster: "c1", Name: "c1-control-plane"}, Node{Cluster: "c1", Name: "c1-worker"}
	cp2, w2 := Node{Cluster: "c2", Name: "c2-control-plane"}, Node{Cluster: "c2", Name: "c2-worker"}
	r := &importRecorder{imports: map[string][]string{}, fail: map[string]bool{"c2-worker": true}, started: &sync.WaitGroup{}}
	r.started.Add(3)
	err := LoadArchives(context.Background(), r, save,
		NodeImages{Node: cp1, Refs: []string{"a", "b"}}, NodeImages{Node: w1, Refs: []string{"b"}},
		NodeImages{Node: cp2}, NodeImages{Node: w2, Refs: []string{"a", "b"}})
	if err == nil || !strings.Contains(err.Error(), "loading a, b into node c2-worker of cluster c2: ctr: boom") ||
		strings.Contains(err.Error(), "c1-") || strings.Contains(err.Error(), "the other nodes") {
		t.Errorf("LoadArchives error %v, want c2-worker's failure alone, named", err)
	}
	if want := []string{"a b", "b"}; !slices.Equal(saves, want) {
		t.Errorf("saved %q, want one archive per set of images: %q", saves, want)
	}
	want := map[string][]string{
		"c1/c1-control-plane": {"archive of a and b"},
		"c1/c1-worker":        {"archive of b"},
		"c2/c2-worker":        {"archive of a and b"},
	}
	if !maps.EqualFunc(r.imports, want, slices.Equal) {
		t.Errorf("imports %q, want one per node wanting images: %q", r.imports, want)
	}
	for _, argv := range r.argv {
		if got := strings.Join(argv, " "); !strings.Contains(got, "ctr --namespace=k8s.io images import") || !strings.HasSuffix(got, " -") {
			t.Errorf("argv %q", got)
		}
	}

	saves = nil
	r = &importRecorder{imports: map[string][]string{}}
	failing := func(context.Context, []string) (string, error) {
		return "", errors.New("saving a from docker: no space left")
	}
	err = LoadArchives(context.Background(), r, failing, NodeImages{Node: cp1, Refs: []string{"a"}})
	if err == nil || !strings.Contains(err.Error(), "saving a from docker") || len(r.imports) != 0 {
		t.Errorf("failed save: err %v, imports %q", err, r.imports)
	}
	if err := LoadArchives(context.Background(), r, save, NodeImages{Node: cp1}); err != nil || len(saves) != 0 || len(r.imports) != 0 {
		t.Errorf("nothing wanted: err %v, saves %q, imports %q", err, saves, r.imports)
	}
}

// dockerSaved writes img as `docker save tag` does: manifest.json, the
// config, and each layer uncompressed as <n>/layer.tar.
func dockerSaved(t *testing.T, img *Image, tag string) string {
	t.Helper()
	v, err := img.V1()
	if err != nil {
		t.Fatal(err)
	}
	cfgName, err := v.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := v.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := v.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	add(cfgName.Hex+".json", cfg)
	var paths []string
	for n, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, fmt.Sprintf("%d/layer.tar", n))
		add(paths[n], data)
	}
	manifest, err := json.Marshal(tarball.Manifest{{Config: cfgName.Hex + ".json", RepoTags: []string{tag}, Layers: paths}})
	if err != nil {
		t.Fatal(err)
	}
	add("manifest.json", manifest)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "docker-saved.tar")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
