package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// synthELF is a minimal little-endian ELF64 shared object: a PT_INTERP if
// interp is set, and a .dynamic with DT_RUNPATH (if set) and DT_NEEDED
// entries, which is all debug/elf (and the closure) reads.
func synthELF(t *testing.T, machine elf.Machine, interp, runpath string, needed ...string) []byte {
	t.Helper()
	const ehsize, phentsize, shentsize = 64, 56, 64
	dynstr := []byte{0}
	str := func(s string) uint64 {
		off := len(dynstr)
		dynstr = append(append(dynstr, s...), 0)
		return uint64(off)
	}
	var dyn []elf.Dyn64
	if runpath != "" {
		dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_RUNPATH), Val: str(runpath)})
	}
	for _, n := range needed {
		dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_NEEDED), Val: str(n)})
	}
	dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_NULL)})
	var dynBuf bytes.Buffer
	binary.Write(&dynBuf, binary.LittleEndian, dyn)
	shstr := []byte("\x00.dynstr\x00.dynamic\x00.shstrtab\x00")

	phnum := 0
	if interp != "" {
		phnum = 1
	}
	interpOff := uint64(ehsize + phnum*phentsize)
	interpB := append([]byte(interp), 0)
	dynstrOff := interpOff + uint64(len(interpB))
	dynOff := dynstrOff + uint64(len(dynstr))
	shstrOff := dynOff + uint64(dynBuf.Len())
	shOff := shstrOff + uint64(len(shstr))

	var b bytes.Buffer
	h := elf.Header64{Type: uint16(elf.ET_DYN), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Shoff: shOff, Ehsize: ehsize, Phentsize: phentsize, Phnum: uint16(phnum), Shentsize: shentsize, Shnum: 4, Shstrndx: 3}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	if phnum > 0 {
		h.Phoff = ehsize
	}
	binary.Write(&b, binary.LittleEndian, h)
	if phnum > 0 {
		binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R),
			Off: interpOff, Filesz: uint64(len(interpB)), Memsz: uint64(len(interpB)), Align: 1})
	}
	b.Write(interpB)
	b.Write(dynstr)
	b.Write(dynBuf.Bytes())
	b.Write(shstr)
	binary.Write(&b, binary.LittleEndian, []elf.Section64{
		{},
		{Name: 1, Type: uint32(elf.SHT_STRTAB), Off: dynstrOff, Size: uint64(len(dynstr)), Addralign: 1},
		{Name: 9, Type: uint32(elf.SHT_DYNAMIC), Off: dynOff, Size: uint64(dynBuf.Len()), Link: 1, Addralign: 8, Entsize: 16},
		{Name: 18, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstr)), Addralign: 1},
	})
	return b.Bytes()
}

// tarEntry is one entry of a synthetic rootfs: a symlink if link is set
// (a hard link if hard too), else a regular file of data, executable in
// usr/sbin or if exec.
type tarEntry struct {
	name, link string
	hard, exec bool
	data       []byte
}

func writeRootfs(t *testing.T, entries []tarEntry) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rootfs.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for _, e := range entries {
		h := &tar.Header{Name: "./" + e.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if strings.HasPrefix(e.name, "usr/sbin/") || e.exec {
			h.Mode = 0o755
		}
		if e.link != "" {
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
			if e.hard {
				h.Typeflag = tar.TypeLink
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

// listing is a layer's files as "path" (regular) or "path -> target".
func listing(files []file) []string {
	var out []string
	for _, f := range files {
		if f.link != "" {
			out = append(out, f.path+" -> "+f.link)
		} else {
			out = append(out, f.path)
		}
	}
	return out
}

// TestClosureSynthetic: the loader's lookups through directory symlinks,
// soname links, ld.so.conf includes, $ORIGIN runpaths, a wrong-machine
// library earlier in the search path, a hard link and a dependency cycle;
// and nothing the objects do not load.
func TestClosureSynthetic(t *testing.T) {
	x86 := elf.EM_X86_64
	tool := synthELF(t, x86, "/lib64/ld.so.9", "", "liba.so.1", "libc.so.6")
	rootfs := writeRootfs(t, []tarEntry{
		{name: "lib", link: "usr/lib"},
		{name: "lib64", link: "usr/lib64"},
		{name: "etc/ld.so.conf", data: []byte("include /etc/ld.so.conf.d/*.conf\n")},
		{name: "etc/ld.so.conf.d/multi.conf", data: []byte("# multiarch\n/usr/local/lib/multi\n/lib/multi\n")},
		{name: "usr/lib64/ld.so.9", link: "/lib/multi/ld.so.9"},
		{name: "usr/lib/multi/ld.so.9", data: synthELF(t, x86, "", "")},
		{name: "usr/lib/multi/libc.so.6", data: synthELF(t, x86, "", "", "ld.so.9")},
		{name: "usr/lib/multi/liba.so.1", link: "liba.so.1.2"},
		{name: "usr/lib/multi/liba.so.1.2", data: synthELF(t, x86, "", "$ORIGIN/../priv", "libb.so", "libc.so.6")},
		{name: "usr/lib/multi/libunused.so.1", data: synthELF(t, x86, "", "")},
		{name: "usr/lib/priv/libc.so.6", data: synthELF(t, elf.EM_AARCH64, "", "")},
		{name: "usr/lib/priv/libb.so", data: synthELF(t, x86, "", "", "liba.so.1")},
		{name: "usr/lib/multi/plug/p1.so", data: synthELF(t, x86, "", "", "liba.so.1")},
		{name: "usr/lib/multi/plug/p2.so", link: "p1.so"},
		{name: "usr/sbin/tool-multi", data: tool},
		{name: "usr/sbin/tool-nft", link: "tool-multi"},
		{name: "etc/alternatives/tool", link: "/usr/sbin/tool-nft"},
		{name: "usr/sbin/tool", link: "/etc/alternatives/tool"},
		{name: "usr/sbin/tool-hard", link: "usr/sbin/tool-multi", hard: true},
	})
	ts := toolSet{commands: []string{"usr/sbin/tool", "usr/sbin/tool-hard"}, plugins: []string{"usr/lib/*/plug/*.so"}}
	files, err := ts.layerFiles(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"lib64/ld.so.9 -> ../usr/lib/multi/ld.so.9",
		"usr/lib/multi/ld.so.9",
		"usr/lib/multi/liba.so.1 -> liba.so.1.2",
		"usr/lib/multi/liba.so.1.2",
		"usr/lib/multi/libc.so.6",
		"usr/lib/multi/plug/p1.so",
		"usr/lib/multi/plug/p2.so -> p1.so",
		"usr/lib/priv/libb.so",
		"usr/sbin/tool -> tool-multi",
		"usr/sbin/tool-hard",
		"usr/sbin/tool-multi",
	}
	if got := listing(files); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("layer:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range files {
		if (f.path == "usr/sbin/tool-multi" || f.path == "usr/sbin/tool-hard") && (!bytes.Equal(f.data, tool) || f.mode != 0o755) {
			t.Errorf("%s: %d bytes mode %o, want the tool's %d bytes, 0755", f.path, len(f.data), f.mode, len(tool))
		}
	}

	missing := writeRootfs(t, []tarEntry{{name: "usr/sbin/tool", data: synthELF(t, x86, "", "", "libgone.so.3")}})
	if _, err := (toolSet{commands: []string{"usr/sbin/tool"}}).layerFiles(missing); err == nil || !strings.Contains(err.Error(), "libgone.so.3") {
		t.Errorf("a missing library gave %v, want an error naming it", err)
	}
	loop := writeRootfs(t, []tarEntry{{name: "usr/sbin/a", link: "b"}, {name: "usr/sbin/b", link: "a"}})
	if _, err := (toolSet{commands: []string{"usr/sbin/a"}}).layerFiles(loop); err == nil || !strings.Contains(err.Error(), "symbolic links") {
		t.Errorf("a symlink loop gave %v", err)
	}
}

// nodeRootfs is the node rootfs tarball make e2e-env builds, or a skip.
func nodeRootfs(t *testing.T) string {
	cache := os.Getenv("MESHCTL_CACHE")
	if cache == "" {
		cache = "/var/cache/meshctl"
	}
	p, err := newest(filepath.Join(cache, "rootfs", "node-*.tar"))
	if err != nil {
		t.Skipf("no node rootfs tarball (%v): make e2e-env builds it", err)
	}
	return p
}

// TestClosureNodeRootfs takes the netfilter tools out of the real node
// rootfs, runs them chrooted into nothing but that layer, and checks the
// layer's libraries are exactly those the real dynamic loader maps for
// the binaries and the xtables extensions.
func TestClosureNodeRootfs(t *testing.T) {
	files, err := netfilterTools().layerFiles(nodeRootfs(t))
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]file{}
	for _, f := range files {
		byPath[f.path] = f
	}
	for _, c := range netfilterTools().commands {
		if _, ok := byPath[c]; !ok {
			t.Errorf("layer lacks %s", c)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("running the layer needs chroot, so root")
	}
	dir := t.TempDir()
	extract(t, dir, files)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dir}
		cmd.Env = []string{"PATH=/usr/sbin"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, c := range []string{"iptables-nft", "iptables-legacy-save", "ip6tables-restore", "ip6tables-nft-save", "nft"} {
		if out := run("/usr/sbin/"+c, "--version"); !regexp.MustCompile(`v\d+\.\d+`).MatchString(out) {
			t.Errorf("%s --version: %q", c, out)
		}
	}
	// the extensions Istio's rules use load (help needs no kernel)
	if out := run("/usr/sbin/iptables-nft", "-p", "tcp", "-m", "mark", "-m", "socket", "-j", "TPROXY", "-h"); !strings.Contains(out, "TPROXY target options") || !strings.Contains(out, "mark match options") {
		t.Errorf("iptables-nft extension help: %s", out)
	}

	t.Run("Istio's in-pod rules", func(t *testing.T) { restoreIstioRules(t, dir) })

	// the loader's own account: ld.so --list of every ELF root
	if _, err := os.Lstat(filepath.Join(dir, "lib64", "ld-linux-x86-64.so.2")); err != nil {
		t.Skipf("no x86-64 loader (%v): the check below knows only x86-64's", err)
	}
	mapped := map[string]bool{}
	roots := []string{"/usr/sbin/xtables-nft-multi", "/usr/sbin/xtables-legacy-multi", "/usr/sbin/nft"}
	for _, f := range files {
		if strings.Contains(f.path, "/xtables/") && f.link == "" {
			roots = append(roots, "/"+f.path)
		}
	}
	arrow := regexp.MustCompile(`(?m)^\s*(?:\S+ => )?(/\S+) \(0x`)
	for _, r := range roots {
		out := run("/lib64/ld-linux-x86-64.so.2", "--list", r)
		if strings.Contains(out, "not found") {
			t.Errorf("%s: %s", r, out)
		}
		for _, m := range arrow.FindAllStringSubmatch(out, -1) {
			real, err := filepath.EvalSymlinks(filepath.Join(dir, m[1]))
			if err != nil {
				t.Fatal(err)
			}
			mapped[strings.TrimPrefix(real, dir+"/")] = true
		}
	}
	var extra, lacking []string
	for _, f := range files {
		if f.link == "" && strings.Contains(f.path, "/lib/") && !strings.Contains(f.path, "/xtables/") && !mapped[f.path] {
			extra = append(extra, f.path)
		}
	}
	for p := range mapped {
		if _, ok := byPath[p]; !ok {
			lacking = append(lacking, p)
		}
	}
	sort.Strings(lacking)
	if len(extra) > 0 || len(lacking) > 0 || len(mapped) < 5 {
		t.Errorf("layer libraries differ from the loader's: not mapped %v, not in the layer %v (%d mapped)", extra, lacking, len(mapped))
	}
}

// restoreIstioRules has the layer's iptables-restore load the in-pod rules
// Istio's ambient node agent writes (its golden default.golden), in a
// network namespace of the test's own, and reads them back.
func restoreIstioRules(t *testing.T, dir string) {
	version, err := pinnedVersion("../../../bench/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	// read where make e2e-env's download put it; a test downloads nothing
	modCache, err := output(context.Background(), "", "go", "env", "GOMODCACHE")
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join(modCache, module+"@"+version, "cni", "pkg", "iptables", "testdata", "default.golden"))
	if err != nil {
		t.Skipf("Istio's in-pod rules (MESHCTL_ISTIO=1 make e2e-env downloads them): %v", err)
	}
	// the golden file lists the commands run, then the iptables-restore input
	i := bytes.Index(golden, []byte("* "))
	if i < 0 {
		t.Fatalf("no table in default.golden:\n%s", golden)
	}
	rules := golden[i:]
	var saved []byte
	inNewNetns(t, func() error {
		restore := exec.Command("/usr/sbin/iptables-restore", "--noflush")
		restore.SysProcAttr = &syscall.SysProcAttr{Chroot: dir}
		restore.Stdin = bytes.NewReader(rules)
		if out, err := restore.CombinedOutput(); err != nil {
			return fmt.Errorf("iptables-restore: %w: %s", err, out)
		}
		save := exec.Command("/usr/sbin/iptables-save")
		save.SysProcAttr = &syscall.SysProcAttr{Chroot: dir}
		saved, err = save.CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables-save: %w: %s", err, saved)
		}
		return nil
	})
	for _, want := range []string{
		"-A ISTIO_PRERT -m mark --mark 0x539/0xfff -j CONNMARK --set-xmark 0x111/0xfff",
		"-j REDIRECT --to-ports 15006",
		"-j CT --zone 1",
	} {
		if !bytes.Contains(saved, []byte(want)) {
			t.Errorf("iptables-save after restoring Istio's rules lacks %q:\n%s", want, saved)
		}
	}
}

// inNewNetns runs fn, and the processes it starts, in a new network
// namespace: fn's goroutine keeps a thread of its own that is never given
// back (a locked thread ends with its goroutine), and a child forks from it.
func inNewNetns(t *testing.T, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// extract writes a layer's files under dir.
func extract(t *testing.T, dir string, files []file) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case f.dir:
			err = os.MkdirAll(p, os.FileMode(f.mode))
		case f.link != "":
			err = os.Symlink(f.link, p)
		default:
			err = os.WriteFile(p, f.data, os.FileMode(f.mode))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
