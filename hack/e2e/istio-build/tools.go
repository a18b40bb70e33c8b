package main

import (
	"debug/elf"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// toolSet is what a layer takes from the node rootfs: commands, at the
// paths they have there, and plugins a command dlopens (so no DT_NEEDED
// names them), each with its shared-library closure; and the empty
// directories the commands expect.
type toolSet struct {
	commands []string // paths in the rootfs
	plugins  []string // globs of paths in the rootfs
	dirs     []string
}

// netfilterTools are the commands Istio's ambient node agent execs to
// program traffic redirection, as its base images ship them (docker/
// Dockerfile.base: Debian's iptables and nftables, iptables set to nft):
//
//   - tools/istio-iptables/pkg/dependencies (DetectIptablesVersion) runs
//     iptables-legacy-save, then iptables-nft-save, then iptables-save (and
//     ip6tables-* for IPv6), and then that set's binary and -restore;
//   - cni/pkg/nodeagent runs `nft --json list tables`, and knftables runs
//     nft, when native nftables is on.
//
// iptables loads its match and target extensions (-p tcp, -m mark,
// -j TPROXY ...) with dlopen from its xtables directory: the plugins.
// iptables-legacy locks /run/xtables.lock, and the busybox base has no
// /run (Istio's iptables image declares it for that).
func netfilterTools() toolSet {
	var ts toolSet
	for _, family := range []string{"iptables", "ip6tables"} {
		for _, variant := range []string{"-legacy", "-nft", ""} {
			for _, op := range []string{"", "-save", "-restore"} {
				ts.commands = append(ts.commands, "usr/sbin/"+family+variant+op)
			}
		}
	}
	ts.commands = append(ts.commands, "usr/sbin/nft")
	ts.plugins = []string{"usr/lib/*/xtables/*.so"}
	ts.dirs = []string{"run"}
	return ts
}

// key says what the layer depends on besides the rootfs tarball.
func (ts toolSet) key() string {
	return strings.Join(ts.commands, " ") + "\n" + strings.Join(ts.plugins, " ") + "\n" + strings.Join(ts.dirs, " ")
}

// layerFiles are the files of ts taken from the rootfs tarball, sorted by
// path: every command and plugin, every library in their closure and the
// dynamic loader at their regular paths, plus a symlink at each name a
// command is run by or a library is looked up by that is not that path.
func (ts toolSet) layerFiles(tarball string) ([]file, error) {
	r, err := openRootfs(tarball)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	c, err := newClosure(r)
	if err != nil {
		return nil, err
	}
	for _, cmd := range ts.commands {
		if err := c.addRoot(cmd); err != nil {
			return nil, fmt.Errorf("node rootfs %s: %w", tarball, err)
		}
	}
	for _, g := range ts.plugins {
		ms := r.glob(g)
		if len(ms) == 0 {
			return nil, fmt.Errorf("node rootfs %s: nothing matches %s", tarball, g)
		}
		for _, p := range ms {
			if err := c.addRoot(p); err != nil {
				return nil, fmt.Errorf("node rootfs %s: %w", tarball, err)
			}
		}
	}
	files, err := c.files()
	if err != nil {
		return nil, err
	}
	for _, d := range ts.dirs {
		files = append(files, file{path: clean(d), dir: true, mode: 0o755})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files, nil
}

// closure collects an ELF's shared-library closure as the dynamic loader
// would resolve it: the interpreter by its exact path, each DT_NEEDED name
// in the object's DT_RUNPATH (DT_RPATH without it), then the rootfs's
// library directories, skipping objects of another class or machine.
type closure struct {
	r    *rootfs
	dirs []string
	out  map[string]entry  // regular files by canonical path
	link map[string]string // symlinks: name -> canonical path
	done map[string]bool   // ELF objects whose dependencies are in
}

func newClosure(r *rootfs) (*closure, error) {
	dirs, err := r.libraryDirs()
	if err != nil {
		return nil, err
	}
	return &closure{r: r, dirs: dirs, out: map[string]entry{}, link: map[string]string{}, done: map[string]bool{}}, nil
}

// addRoot adds the object at name and everything it loads.
func (c *closure) addRoot(name string) error {
	canon, err := c.addName(name)
	if err != nil {
		return err
	}
	return c.addELF(canon)
}

// addName adds the file name resolves to and, if name is another path, a
// symlink from name to it; it returns the file's path. The symlink goes
// straight to the file, whatever chain the rootfs has between (Debian's
// /usr/sbin/iptables -> /etc/alternatives/iptables -> iptables-nft ->
// xtables-nft-multi becomes iptables -> xtables-nft-multi).
func (c *closure) addName(name string) (string, error) {
	name = clean(name)
	canon, e, err := c.r.regular(name)
	if err != nil {
		return "", err
	}
	c.out[canon] = e
	if canon != name {
		c.link[name] = canon
	}
	return canon, nil
}

func (c *closure) addELF(canon string) error {
	if c.done[canon] {
		return nil
	}
	c.done[canon] = true
	f, err := c.r.elf(canon)
	if err != nil {
		return err
	}
	interp, err := interpreter(f)
	if err != nil {
		return fmt.Errorf("%s: %w", canon, err)
	}
	if interp != "" {
		// the kernel opens PT_INTERP by its literal path
		if _, err := c.addName(interp); err != nil {
			return fmt.Errorf("%s: interpreter: %w", canon, err)
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("%s: %w", canon, err)
	}
	for _, lib := range needed {
		name, err := c.find(lib, f, canon)
		if err != nil {
			return err
		}
		libCanon, err := c.addName(name)
		if err != nil {
			return err
		}
		if err := c.addELF(libCanon); err != nil {
			return err
		}
	}
	return nil
}

// find is the path the loader opens for lib, needed by the object at canon.
func (c *closure) find(lib string, from *elf.File, canon string) (string, error) {
	if strings.Contains(lib, "/") {
		return clean(lib), nil
	}
	search, err := c.runpath(from, canon)
	if err != nil {
		return "", err
	}
	for _, d := range append(search, c.dirs...) {
		name := path.Join(d, lib)
		f, err := c.r.elf(name)
		if err != nil {
			continue
		}
		if f.Class == from.Class && f.Machine == from.Machine {
			return name, nil
		}
	}
	return "", fmt.Errorf("%s (needed by %s): not found in %s", lib, canon, strings.Join(append(search, c.dirs...), ", "))
}

// runpath is the object's own search path, $ORIGIN expanded, each
// directory resolved.
func (c *closure) runpath(f *elf.File, canon string) ([]string, error) {
	rp, err := f.DynString(elf.DT_RUNPATH)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", canon, err)
	}
	if len(rp) == 0 {
		if rp, err = f.DynString(elf.DT_RPATH); err != nil {
			return nil, fmt.Errorf("%s: %w", canon, err)
		}
	}
	var out []string
	origin := "/" + path.Dir(canon)
	for _, s := range rp {
		for _, d := range strings.Split(s, ":") {
			d = strings.NewReplacer("${ORIGIN}", origin, "$ORIGIN", origin).Replace(d)
			if d == "" {
				continue
			}
			if r, err := c.r.resolve(d); err == nil {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// interpreter is the ELF's PT_INTERP, "" for a static executable or a
// shared library.
func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return "", fmt.Errorf("reading PT_INTERP: %w", err)
		}
		return strings.TrimRight(string(b), "\x00"), nil
	}
	return "", nil
}

// files are the layer's files, sorted by path: regular files with their
// bytes and the rootfs's permission bits, symlinks relative to their
// directory (so they hold in any root).
func (c *closure) files() ([]file, error) {
	var out []file
	for p, e := range c.out {
		data, err := io.ReadAll(c.r.open(e))
		if err != nil {
			return nil, fmt.Errorf("node rootfs %s: %s: %w", c.r.name, p, err)
		}
		out = append(out, file{path: p, data: data, mode: e.mode & 0o7777})
	}
	for name, canon := range c.link {
		target, err := filepath.Rel(path.Dir(name), canon)
		if err != nil {
			return nil, err
		}
		out = append(out, file{path: name, link: target, mode: 0o777})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	for i := 1; i < len(out); i++ {
		if out[i].path == out[i-1].path {
			return nil, fmt.Errorf("node rootfs %s: %s is both a file and a link", c.r.name, out[i].path)
		}
	}
	return out, nil
}
