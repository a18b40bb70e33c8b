package main

import (
	"archive/tar"
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
)

// rootfs is a filesystem tarball read in place: an index of its entries by
// path, and the bytes of a regular file read where they lie (an uncompressed
// tar keeps each file's bytes contiguous after its header), so taking a few
// files out of the 270 MB node rootfs costs one pass over its headers.
type rootfs struct {
	name    string
	f       *os.File
	entries map[string]entry // by clean path: no leading "/" or "./"; "" is the root
}

type entry struct {
	typ       byte   // tar.TypeReg, TypeDir, TypeSymlink or TypeLink
	link      string // a symlink's target as written; a hard link's clean path
	mode      int64
	off, size int64 // a regular file's bytes in the tarball
}

func openRootfs(name string) (*rootfs, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("node rootfs: %w", err)
	}
	r := &rootfs{name: name, f: f, entries: map[string]entry{"": {typ: tar.TypeDir, mode: 0o755}}}
	if err := r.index(); err != nil {
		f.Close()
		return nil, fmt.Errorf("node rootfs %s: %w", name, err)
	}
	return r, nil
}

func (r *rootfs) Close() error { return r.f.Close() }

// index reads every header. tar.Reader reads no further than the header it
// returns, so the file's offset then is where that entry's bytes start.
func (r *rootfs) index() error {
	tr := tar.NewReader(r.f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := clean(h.Name)
		e := entry{typ: h.Typeflag, mode: h.Mode}
		switch h.Typeflag {
		case tar.TypeReg:
			if e.off, err = r.f.Seek(0, io.SeekCurrent); err != nil {
				return err
			}
			e.size = h.Size
		case tar.TypeSymlink:
			e.link = h.Linkname
		case tar.TypeLink:
			e.link = clean(h.Linkname)
		case tar.TypeDir:
		default:
			continue // devices, fifos: nothing a binary loads
		}
		r.entries[p] = e
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := r.entries[d]; ok {
				break
			}
			r.entries[d] = entry{typ: tar.TypeDir, mode: 0o755} // a tar need not list parents
		}
	}
}

// clean is p relative to the root: "./usr/sbin/nft", "/usr/sbin/nft" and
// "usr/sbin/nft" are all "usr/sbin/nft".
func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

// maxHops is the kernel's limit on symlinks followed in one lookup.
const maxHops = 40

// resolve is p with every symlink in it followed, as the kernel would with
// the rootfs as its root: an absolute target starts again at the root.
func (r *rootfs) resolve(p string) (string, error) {
	return r.walk(clean(p), 0)
}

func (r *rootfs) walk(p string, hops int) (string, error) {
	parts := strings.Split(p, "/")
	cur := ""
	for i, part := range parts {
		if part == "" {
			continue
		}
		next := path.Join(cur, part)
		e, ok := r.entries[next]
		if !ok {
			return "", fmt.Errorf("%s: %w", p, fs.ErrNotExist)
		}
		if e.typ != tar.TypeSymlink {
			cur = next
			continue
		}
		if hops++; hops > maxHops {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		target := e.link
		if !path.IsAbs(target) {
			target = path.Join(cur, target) // cur is resolved, so ".." is lexical
		}
		return r.walk(clean(path.Join(append([]string{target}, parts[i+1:]...)...)), hops)
	}
	return cur, nil
}

// regular is the regular file p resolves to, with its entry (a hard link's
// entry has the bytes of the file it links to).
func (r *rootfs) regular(p string) (string, entry, error) {
	canon, err := r.resolve(p)
	if err != nil {
		return "", entry{}, err
	}
	e := r.entries[canon]
	if e.typ == tar.TypeLink {
		t, ok := r.entries[e.link]
		if !ok || t.typ != tar.TypeReg {
			return "", entry{}, fmt.Errorf("%s: hard link to %s, not a regular file", p, e.link)
		}
		e.off, e.size = t.off, t.size
	} else if e.typ != tar.TypeReg {
		return "", entry{}, fmt.Errorf("%s: not a regular file", p)
	}
	return canon, e, nil
}

func (r *rootfs) open(e entry) *io.SectionReader { return io.NewSectionReader(r.f, e.off, e.size) }

func (r *rootfs) readFile(p string) ([]byte, error) {
	_, e, err := r.regular(p)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r.open(e))
}

func (r *rootfs) elf(p string) (*elf.File, error) {
	_, e, err := r.regular(p)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(r.open(e))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return f, nil
}

// glob is the entries whose path (as written, symlinks not followed) matches
// pattern, sorted.
func (r *rootfs) glob(pattern string) []string {
	pattern = clean(pattern)
	var out []string
	for p := range r.entries {
		if ok, _ := path.Match(pattern, p); ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// libraryDirs are the directories the dynamic loader searches, in its order,
// each resolved and listed once: those of the rootfs's /etc/ld.so.conf (with
// its includes), then the loader's own, /lib and /usr/lib.
func (r *rootfs) libraryDirs() ([]string, error) {
	var dirs []string
	if err := r.ldSoConf("etc/ld.so.conf", &dirs, 0); err != nil {
		return nil, err
	}
	dirs = append(dirs, "lib", "usr/lib")
	var out []string
	seen := map[string]bool{}
	for _, d := range dirs {
		canon, err := r.resolve(d)
		if err != nil || r.entries[canon].typ != tar.TypeDir || seen[canon] {
			continue // a listed directory may not exist
		}
		seen[canon] = true
		out = append(out, canon)
	}
	return out, nil
}

// ldSoConf adds the directories a ld.so.conf lists: one or more a line,
// "include <glob>" for more files, "#" comments.
func (r *rootfs) ldSoConf(name string, dirs *[]string, depth int) error {
	if depth > 8 {
		return fmt.Errorf("%s: includes nested too deep", name)
	}
	data, err := r.readFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.FieldsFunc(line, func(c rune) bool { return c == ' ' || c == '\t' || c == ':' || c == ',' })
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "include":
			for _, g := range fields[1:] {
				if !path.IsAbs(g) {
					g = path.Join("/", path.Dir(name), g)
				}
				for _, inc := range r.glob(g) {
					if err := r.ldSoConf(inc, dirs, depth+1); err != nil {
						return err
					}
				}
			}
		case "hwcap": // obsolete, ignored by ldconfig
		default:
			*dirs = append(*dirs, fields...)
		}
	}
	return nil
}
