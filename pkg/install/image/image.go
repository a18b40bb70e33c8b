package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/meshctl/meshctl/pkg/version"
)

// Defaults and the paths inside the image.
const (
	DefaultRepository = "meshctl/dataplane"
	// BinaryPath holds the binary, and is the entrypoint, when the image is
	// built from meshctl itself.
	BinaryPath = "/usr/local/bin/meshctl"
	// DataplaneBinaryPath holds it when the image is built from
	// meshctl-dataplane. Both accept the charts' `dataplane <command> …`.
	DataplaneBinaryPath = "/usr/local/bin/" + DataplaneBinaryName
	// CNIPath is the same binary under the name the CNI runtime runs it by
	// (main dispatches on argv[0]); install-cni copies it to the host.
	CNIPath = "/usr/local/bin/meshctl-cni"
)

// layerCompression is the layer's gzip level. Every node receives the
// image whole, through `docker exec` into `ctr import`: gzipped, the
// dataplane binary's layer is 12.3 MB instead of 32.8 (meshctl's 46 instead
// of 105), for a decompression on the node. gzip.BestSpeed gets most of
// gzip.BestCompression's size (10.7 MB) at a sixth of its CPU (see
// BenchmarkLayerCompression).
const layerCompression = gzip.BestSpeed

// epoch is every timestamp in the image: a reproducible build must not
// depend on when it ran.
var epoch = time.Unix(0, 0).UTC()

// Image is the dataplane image, built in memory.
type Image struct {
	binary   string
	notice   string
	registry string
	repo     string
	tag      string

	ref        name.Tag
	img        func() (v1.Image, error)
	arch       string
	entrypoint string
	id         string
	layer      *gzLayer
	// saved is FromArchive's archive when it holds this image under this
	// very name: Load sends it as Docker wrote it (see archive).
	saved string
}

// Option configures an Image.
type Option func(*Image)

// WithBinary packages this file (default: meshctl-dataplane next to the
// running executable or on PATH, else the running executable; see Notice).
func WithBinary(path string) Option { return func(i *Image) { i.binary = path } }

// WithRepository names the image (default meshctl/dataplane).
func WithRepository(repo string) Option { return func(i *Image) { i.repo = repo } }

// WithTag tags the image (default: meshctl's version).
func WithTag(tag string) Option { return func(i *Image) { i.tag = tag } }

// WithRegistry puts the image under a registry (host[:port] and an optional
// path: localhost:5001, ghcr.io/me), where Push sends it; Ref and Repository
// then include it.
func WithRegistry(registry string) Option {
	return func(i *Image) { i.registry = strings.TrimSuffix(registry, "/") }
}

// New reads and checks the binary and builds the image.
func New(opts ...Option) (*Image, error) {
	i := &Image{repo: DefaultRepository, tag: Tag(version.String())}
	for _, o := range opts {
		o(i)
	}
	if i.binary == "" {
		var err error
		if i.binary, i.notice, err = defaultFinder.find(); err != nil {
			return nil, err
		}
	}
	full := i.repo
	if i.registry != "" {
		full = i.registry + "/" + i.repo
	}
	ref, err := name.NewTag(full+":"+i.tag, name.WithDefaultRegistry(""))
	if err != nil && i.registry != "" {
		return nil, fmt.Errorf("dataplane image: bad registry %q (want HOST[:PORT][/PATH]): %w", i.registry, err)
	}
	if err != nil {
		return nil, fmt.Errorf("dataplane image: bad name %s:%s: %w", full, i.tag, err)
	}
	if i.registry != "" && ref.RegistryStr() == "" {
		// "myregistry/x" parses as a Docker Hub path: a registry must look
		// like a host (a dot, a port, or localhost).
		return nil, fmt.Errorf("dataplane image: registry %q is not a registry host (want HOST[:PORT][/PATH], e.g. localhost:5001 or ghcr.io/me)", i.registry)
	}
	i.ref = ref
	if i.arch, err = checkStatic(i.binary); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(i.binary)
	if err != nil {
		return nil, fmt.Errorf("dataplane image: %w", err)
	}
	i.entrypoint = BinaryPath
	if isDataplaneBinary(i.binary) {
		i.entrypoint = DataplaneBinaryPath
	}
	layer, err := layerTar(bin, i.entrypoint, layerCompression)
	if err != nil {
		return nil, err
	}
	// The config is written here, not read back from go-containerregistry,
	// whose image would compress the layer first to describe it: the ID
	// needs only the diff ID, and a rerun whose nodes all hold the image
	// never compresses it (Missing needs the ID, Load the compressed layer).
	cfg := &v1.ConfigFile{
		Architecture: i.arch,
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		Config: v1.Config{
			Entrypoint: []string{i.entrypoint},
			Env:        []string{"PATH=/usr/local/bin"},
			WorkingDir: "/",
			Labels: map[string]string{
				"org.opencontainers.image.title":   "meshctl dataplane",
				"org.opencontainers.image.version": version.String(),
			},
		},
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{layer.diffID}},
		History: []v1.History{{Created: v1.Time{Time: epoch}, CreatedBy: "meshctl: " + i.entrypoint}},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("dataplane image config: %w", err)
	}
	sum := sha256.Sum256(raw)
	i.id, i.layer = "sha256:"+hex.EncodeToString(sum[:]), layer
	// go-containerregistry's image describes its layer, compressing it, as
	// soon as it is made: made when first needed.
	i.img = sync.OnceValues(func() (v1.Image, error) {
		img, err := mutate.AppendLayers(empty.Image, layer)
		if err != nil {
			return nil, fmt.Errorf("dataplane image: %w", err)
		}
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			return nil, fmt.Errorf("dataplane image: %w", err)
		}
		return img, nil
	})
	return i, nil
}

// Tag turns a version into an image tag: characters a tag may not have
// (a semver's "+build", say) become "-".
func Tag(v string) string {
	t := regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(v, "-")
	t = strings.TrimLeft(t, ".-")
	if t == "" {
		t = "dev"
	}
	return t[:min(len(t), 128)]
}

// Ref is the image's name, e.g. meshctl/dataplane:v0.1.0 (with its registry
// first when it has one).
func (i *Image) Ref() string { return i.Repository() + ":" + i.ref.TagStr() }

// Repository and TagName are Ref's two parts, as Helm values want them.
func (i *Image) Repository() string { return i.ref.Context().Name() }

// TagName is the image's tag.
func (i *Image) TagName() string { return i.ref.TagStr() }

// ContainerdRef is the name the image has in a node's containerd after Load,
// and the one the kubelet asks for: Ref in Docker's normalized form
// (docker.io/meshctl/dataplane:v0.1.0), because `ctr images import`
// normalizes a docker-archive's tags that way.
func (i *Image) ContainerdRef() string {
	reg, repo := i.ref.RegistryStr(), i.ref.RepositoryStr()
	switch reg {
	case "", name.DefaultRegistry, "docker.io":
		// Docker Hub: official images live under library/.
		if !strings.Contains(repo, "/") {
			repo = "library/" + repo
		}
		reg = "docker.io"
	}
	return reg + "/" + repo + ":" + i.ref.TagStr()
}

// ID is the digest of the image's config, what containerd and Docker call
// the image ID: it changes exactly when the content does.
func (i *Image) ID() (string, error) { return i.id, nil }

// Architecture is the binary's, hence the image's, GOARCH.
func (i *Image) Architecture() string { return i.arch }

// Binary is the file packaged.
func (i *Image) Binary() string { return i.binary }

// Entrypoint is where the binary is in the image: BinaryPath or
// DataplaneBinaryPath.
func (i *Image) Entrypoint() string { return i.entrypoint }

// Notice is one line for the user when New chose the binary and it is not
// the dataplane binary, saying how to get the smaller image; "" otherwise.
func (i *Image) Notice() string { return i.notice }

// V1 is the image for go-containerregistry (tests inspect it).
func (i *Image) V1() (v1.Image, error) { return i.img() }

// WriteTarball writes the image as a docker-archive (`docker save`'s
// format), which both `docker load` and `ctr images import` read.
func (i *Image) WriteTarball(w io.Writer) error {
	img, err := i.img()
	if err != nil {
		return err
	}
	if err := tarball.Write(i.ref, img, w); err != nil {
		return fmt.Errorf("writing %s: %w", i.Ref(), err)
	}
	return nil
}

// Push writes the image to its registry (WithRegistry) and returns it by
// digest, repository@sha256:…. Credentials come from the Docker config
// (~/.docker/config.json, credential helpers) as docker push finds them;
// localhost, loopback and RFC 1918 registries are spoken to over plain HTTP.
func (i *Image) Push(ctx context.Context) (string, error) {
	if i.registry == "" {
		return "", fmt.Errorf("pushing %s: the image has no registry (WithRegistry)", i.Ref())
	}
	img, err := i.img()
	if err != nil {
		return "", err
	}
	if err := remote.Write(i.ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", i.Ref(), err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", i.Ref(), err)
	}
	return i.Repository() + "@" + d.String(), nil
}

// Executor runs a command on a node of a kind cluster with stdin;
// *cluster.Provider is one.
type Executor interface {
	Exec(ctx context.Context, kindName, node string, stdin []byte, argv ...string) error
}

// Node is one node of a kind cluster.
type Node struct {
	Cluster string // kind cluster name
	Name    string // node (container) name
}

// importScript imports a docker-archive from stdin into the CRI's
// containerd namespace, unpacked for the snapshotter the CRI uses (as
// `kind load` does; overlayfs unless the node's config says otherwise), so
// the kubelet finds it and never tries to pull.
const importScript = `snap=$(containerd config dump 2>/dev/null | awk -F'"' '/^[[:space:]]*snapshotter = /{print $2; exit}')
exec ctr --namespace=k8s.io images import --all-platforms --digests --snapshotter="${snap:-overlayfs}" -`

// hasScript exits 0 only when the node's CRI containerd holds the image
// named $1 whose config (the image ID) is $2, with every blob present and
// unpacked. Anything else — absent, another build under the same tag, a
// half-finished import, ctr failing — exits non-zero, and the image is
// imported again, which is always safe.
const hasScript = `m=$(ctr --namespace=k8s.io images ls "name==$1" 2>/dev/null | awk 'NR==2{print $3}')
[ -n "$m" ] && ctr --namespace=k8s.io content get "$m" | grep -qF "\"$2\"" &&
ctr --namespace=k8s.io images check "name==$1" | awk 'NR==2 && /complete/ && $NF=="true"{ok=1} END{exit !ok}'`

// Missing returns the nodes whose containerd lacks this very image (its
// name and its ID), checking every node in parallel: a rerun then skips
// building and sending an archive of tens of megabytes per node. A node
// whose check fails for any reason counts as missing the image.
func (i *Image) Missing(ctx context.Context, exec Executor, nodes ...Node) []Node {
	id, err := i.ID()
	if err != nil {
		return nodes
	}
	type check struct {
		node Node
		has  bool
	}
	checks := make([]*check, len(nodes))
	for k, n := range nodes {
		checks[k] = &check{node: n}
	}
	_ = parallel.ForEach(checks, func(c *check) error {
		c.has = exec.Exec(ctx, c.node.Cluster, c.node.Name, nil, "sh", "-c", hasScript, "has", i.ContainerdRef(), id) == nil
		return nil
	})
	var out []Node
	for _, c := range checks {
		if !c.has {
			out = append(out, c.node)
		}
	}
	return out
}

// Load side-loads the image into every node, all in parallel, and returns
// every node's failure, each naming its cluster and node.
func (i *Image) Load(ctx context.Context, exec Executor, nodes ...Node) error {
	archive, err := i.archive() // shared, read-only: one copy whatever the node count
	if err != nil {
		return err
	}
	return parallel.ForEach(nodes, func(node Node) error { return importArchive(ctx, exec, node, archive, i.Ref()) })
}

// importArchive imports a docker-archive into a node's containerd; the
// error names what (the images the archive holds), the node and its cluster.
func importArchive(ctx context.Context, exec Executor, node Node, archive []byte, what string) error {
	if err := exec.Exec(ctx, node.Cluster, node.Name, archive, "sh", "-c", importScript); err != nil {
		return fmt.Errorf("loading %s into node %s of cluster %s: %w", what, node.Name, node.Cluster, err)
	}
	return nil
}

// NodeImages is a node and the images it is to receive, by the names a
// docker-archive holds them under (as `docker save` was given them).
type NodeImages struct {
	Node Node
	Refs []string
}

// Saver writes a docker-archive holding every one of refs, as one `docker
// save refs...` does, and returns its path; its error names the images.
type Saver func(ctx context.Context, refs []string) (path string, err error)

// LoadArchives side-loads several images at once: each node of want gets
// its images in one import, all nodes in parallel, from one docker-archive
// per distinct set of images, which save writes (one set at a time, before
// any import) once for all the nodes wanting that set. Calling Load image
// after image costs a `docker save` and an import per image and node, one
// image after the other; here layers the images share (Istio's pilot and
// install-cni, MetalLB's controller and speaker) are written and sent
// once, and a node costs one `docker exec` whatever the number of images.
// The archives go to the nodes as save wrote them (see Image.archive); nodes
// wanting nothing are left alone. Every node's failure is returned, each
// naming the images, the node and its cluster.
func LoadArchives(ctx context.Context, exec Executor, save Saver, want ...NodeImages) error {
	type set struct {
		refs    []string
		archive []byte
	}
	sets := map[string]*set{}
	type job struct {
		node Node
		set  *set
	}
	var jobs []job
	var order []*set // save in the order of want: the same docker commands on every run
	for _, w := range want {
		if len(w.Refs) == 0 {
			continue
		}
		key := strings.Join(w.Refs, "\n")
		s := sets[key]
		if s == nil {
			s = &set{refs: w.Refs}
			sets[key] = s
			order = append(order, s)
		}
		jobs = append(jobs, job{node: w.Node, set: s})
	}
	for _, s := range order {
		path, err := save(ctx, s.refs)
		if err != nil {
			return err
		}
		// shared, read-only: one copy whatever the node count
		if s.archive, err = os.ReadFile(path); err != nil {
			return fmt.Errorf("reading the archive of %s: %w", strings.Join(s.refs, ", "), err)
		}
	}
	return parallel.ForEach(jobs, func(j job) error {
		return importArchive(ctx, exec, j.node, j.set.archive, strings.Join(j.set.refs, ", "))
	})
}

// archive is the docker-archive Load sends every node. A docker-saved
// archive of this image under this name is sent as it is: written again by
// go-containerregistry, each of its uncompressed layers would be gzipped
// (8 s of CPU for Istio's 191 MB install-cni) only for every node to gunzip
// it again.
func (i *Image) archive() ([]byte, error) {
	if i.saved != "" {
		b, err := os.ReadFile(i.saved)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", i.Ref(), err)
		}
		return b, nil
	}
	var buf bytes.Buffer
	if err := i.WriteTarball(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// removeScript deletes from the CRI's containerd namespace the image named
// $1 and the other names containerd gave it: the alias importScript's
// --digests made (import-<date>@<manifest digest>) and the name the CRI
// plugin adds once the kubelet has used the image, its ID $2 (the config
// digest). Then nothing refers to the content any more and containerd's
// garbage collector frees it. Images of other names stay; when one has the
// same content, the ID name stays with it, since the CRI lists that image
// by it. A node without the image has nothing to remove.
const removeScript = `images=$(ctr --namespace=k8s.io images ls) || exit
names=$(printf '%s\n' "$images" | awk -v ref="$1" -v id="$2" '
NR > 1 { name[NR] = $1; target[NR] = $3; if ($1 == ref) digest = $3 }
END {
	if (digest == "") exit
	for (i in name) {
		if (target[i] != digest) continue
		if (name[i] == ref || substr(name[i], length(name[i]) - length(digest)) == "@" digest) print name[i]
		else if (name[i] == id) idName = name[i]
		else others++
	}
	if (idName != "" && others == 0) print idName
}')
[ -z "$names" ] || exec ctr --namespace=k8s.io images rm $names`

// Remove deletes the image (ContainerdRef, and the names containerd gave
// it) from the nodes, all in parallel, as uninstalling undoes Load; a node
// without it is fine. It returns every node's failure, joined, each naming
// its cluster and node.
func (i *Image) Remove(ctx context.Context, exec Executor, nodes ...Node) error {
	ref := i.ContainerdRef()
	id, err := i.ID()
	if err != nil {
		return fmt.Errorf("removing %s: %w", ref, err)
	}
	return parallel.ForEach(nodes, func(node Node) error {
		if err := exec.Exec(ctx, node.Cluster, node.Name, nil, "sh", "-c", removeScript, "sh", ref, id); err != nil {
			return fmt.Errorf("removing %s from node %s of cluster %s: %w", ref, node.Name, node.Cluster, err)
		}
		return nil
	})
}

// layerTar is the image's only layer, to be gzipped at level: the
// directories, the binary at entrypoint and the plugin's name for it, every
// header fixed so the digest depends only on the binary.
func layerTar(bin []byte, entrypoint string, level int) (*gzLayer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdrs := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777},
		{Typeflag: tar.TypeDir, Name: "usr/", Mode: 0o755},
		{Typeflag: tar.TypeDir, Name: "usr/local/", Mode: 0o755},
		{Typeflag: tar.TypeDir, Name: "usr/local/bin/", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(entrypoint, "/"), Mode: 0o755, Size: int64(len(bin))},
		{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(CNIPath, "/"), Linkname: path.Base(entrypoint), Mode: 0o777},
	}
	for _, h := range hdrs {
		h.ModTime, h.Format = epoch, tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("dataplane image layer: %w", err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(bin); err != nil {
				return nil, fmt.Errorf("dataplane image layer: %w", err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("dataplane image layer: %w", err)
	}
	l := &gzLayer{tar: buf.Bytes(), level: level}
	sum := sha256.Sum256(l.tar)
	l.diffID = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	return l, nil
}

// gzLayer is a layer held in memory, gzipped once, when first needed: its
// digests are computed once (go-containerregistry's own layers compress
// again, or decompress, on every read).
type gzLayer struct {
	tar    []byte
	level  int
	diffID v1.Hash

	once   sync.Once
	gz     []byte
	digest v1.Hash
	err    error
}

func (l *gzLayer) compress() error {
	l.once.Do(func() {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, l.level)
		if err == nil {
			_, err = zw.Write(l.tar)
		}
		if err == nil {
			err = zw.Close()
		}
		if err != nil {
			l.err = fmt.Errorf("compressing the dataplane image layer: %w", err)
			return
		}
		l.gz = buf.Bytes()
		sum := sha256.Sum256(l.gz)
		l.digest = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	})
	return l.err
}

func (l *gzLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }

func (l *gzLayer) Digest() (v1.Hash, error) {
	if err := l.compress(); err != nil {
		return v1.Hash{}, err
	}
	return l.digest, nil
}

func (l *gzLayer) Size() (int64, error) {
	if err := l.compress(); err != nil {
		return 0, err
	}
	return int64(len(l.gz)), nil
}

func (l *gzLayer) Compressed() (io.ReadCloser, error) {
	if err := l.compress(); err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(l.gz)), nil
}

func (l *gzLayer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.tar)), nil
}

func (l *gzLayer) MediaType() (types.MediaType, error) { return types.DockerLayer, nil }

// checkStatic returns the GOARCH of a static Linux executable, and an error
// saying what to do for anything else: a dynamically linked binary (cgo)
// would fail in the image with a baffling "no such file or directory".
func checkStatic(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("dataplane image: %s is not a Linux executable (%w): the dataplane runs in Linux nodes; build meshctl for linux (GOOS=linux CGO_ENABLED=0) and pass it with --dataplane-binary", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("dataplane image: %s is dynamically linked (built with cgo), but the image has no C library: rebuild with CGO_ENABLED=0 (as `make build` does) or pass a static binary with --dataplane-binary", path)
		}
	}
	arch, ok := map[elf.Machine]string{
		elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386", elf.EM_ARM: "arm",
		elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64",
	}[f.Machine]
	if !ok {
		return "", fmt.Errorf("dataplane image: %s is for machine %s, which meshctl does not package", path, f.Machine)
	}
	return arch, nil
}

// FromArchive reads an image meshctl did not build — Istio's, saved from
// the host's Docker — from a docker-archive (`docker save`'s format), and
// names it ref, so Missing, Load and Remove side-load it as they do the
// dataplane image. An archive of one image is read whatever its tag; one of
// several (`docker save a b`, see LoadArchives) must hold ref among them.
func FromArchive(path, ref string) (*Image, error) {
	tag, err := name.NewTag(ref, name.WithDefaultRegistry(""))
	if err != nil {
		return nil, fmt.Errorf("image %s: bad name: %w", ref, err)
	}
	var which *name.Tag // nil: the archive's only image
	if m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) }); err == nil && len(m) > 1 {
		// tarball matches the archive's tags as name.NewTag resolves them
		// (Docker Hub's default registry), not as tag does.
		t, err := name.NewTag(ref)
		if err != nil {
			return nil, fmt.Errorf("image %s: bad name: %w", ref, err)
		}
		which = &t
	}
	img, err := tarball.ImageFromPath(path, which)
	if err != nil {
		return nil, fmt.Errorf("image %s: reading %s: %w", ref, path, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: reading %s: %w", ref, path, err)
	}
	id, err := img.ConfigName()
	if err != nil {
		return nil, fmt.Errorf("image %s: reading %s: %w", ref, path, err)
	}
	i := &Image{binary: path, repo: tag.RepositoryStr(), tag: tag.TagStr(), ref: tag,
		img: func() (v1.Image, error) { return img, nil }, arch: cfg.Architecture, id: id.String()}
	if savedAs(path, tag) {
		i.saved = path
	}
	return i, nil
}

// savedAs says whether the docker-archive at path holds one image, tagged
// tag alone (as `docker save tag` writes it), so that importing the archive
// as it is names the image as Load must.
func savedAs(path string, tag name.Tag) bool {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil || len(m) != 1 || len(m[0].RepoTags) != 1 {
		return false
	}
	t, err := name.NewTag(m[0].RepoTags[0], name.WithDefaultRegistry(""))
	return err == nil && t.Name() == tag.Name()
}
