package meshca

import (
	"bytes"
	"crypto/x509"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nobody is the uid another user's files get: meshctl must not trust them.
const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
}

// chownAll gives a directory tree to uid.
func chownAll(t *testing.T, dir string, uid int) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// chmodFiles sets the mode of every regular file under dir.
func chmodFiles(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A CA another user planted in this user's (private) directory, with files
// anyone may write, is renewed: every file replaced by one of this user's.
func TestEnsureRenewsPlantedFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		plant  func(t *testing.T, dir string)
		reason string
	}{
		{"world-writable", func(t *testing.T, dir string) { chmodFiles(t, dir, 0o666) }, "writable by others (mode -rw-rw-rw-)"},
		{"key readable by others", func(t *testing.T, dir string) {
			for _, k := range []string{RootKeyFile, filepath.Join("cluster1", CAKeyFile), filepath.Join("cluster2", CAKeyFile)} {
				if err := os.Chmod(filepath.Join(dir, k), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}, RootKeyFile + " is a private key readable by others (mode -rw-r--r--)"},
		{"another user's", func(t *testing.T, dir string) {
			needRoot(t)
			chownAll(t, dir, nobody)
			chmodFiles(t, dir, 0o666)
			// The directories are this user's again: only the files
			// are planted.
			for _, d := range []string{dir, filepath.Join(dir, "cluster1"), filepath.Join(dir, "cluster2")} {
				if err := os.Chown(d, os.Geteuid(), os.Getegid()); err != nil {
					t.Fatal(err)
				}
			}
		}, "belongs to uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "ca")
			ensure(t, dir)
			tc.plant(t, dir)
			planted := readAll(t, dir)
			res := ensure(t, dir)
			if got := actions(res); got != "root=renewed cluster1=renewed cluster2=renewed" {
				t.Errorf("actions %s, want every CA renewed", got)
			}
			if !strings.Contains(res.Root.Reason, tc.reason) {
				t.Errorf("root renewed because %q, want %q", res.Root.Reason, tc.reason)
			}
			after := readAll(t, dir)
			if bytes.Equal(after["/"+RootKeyFile], planted["/"+RootKeyFile]) {
				t.Error("the planted root key was kept")
			}
			assertOwnFiles(t, dir)
		})
	}
}

// assertOwnFiles checks that every file under dir is this user's, written
// by nobody else, and that keys are private.
func assertOwnFiles(t *testing.T, dir string) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if uid, _ := owner(fi); uid != os.Geteuid() {
			t.Errorf("%s belongs to uid %d", p, uid)
		}
		want := os.FileMode(0o644)
		switch {
		case fi.IsDir():
			want = 0o700
		case isKey(fi.Name()):
			want = 0o600
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %s, want %s", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A symbolic link in place of a key is not followed: the key is renewed in
// place of the link, and what it pointed at is left alone.
func TestEnsureReplacesASymlinkedKey(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ca")
	ensure(t, dir)
	elsewhere := filepath.Join(t.TempDir(), "someone-elses-key.pem")
	key := filepath.Join(dir, "cluster1", CAKeyFile)
	orig, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(elsewhere, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, key); err != nil {
		t.Fatal(err)
	}
	res := ensure(t, dir)
	if got := actions(res); got != "root=reused cluster1=renewed cluster2=reused" {
		t.Errorf("actions %s", got)
	}
	if !strings.Contains(res.Clusters[0].Reason, CAKeyFile+" is a symbolic link") {
		t.Errorf("reason %q", res.Clusters[0].Reason)
	}
	if b, _ := os.ReadFile(elsewhere); !bytes.Equal(b, orig) {
		t.Error("the link's target was written")
	}
	assertOwnFiles(t, dir)
}

// A CA directory that is a link, or another user's, is refused: nothing is
// read from it and no key is written into it.
func TestEnsureRefusesForeignDirectories(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir, other string)
		want  string
	}{
		{"ca is a symlink", func(t *testing.T, dir, other string) {
			if err := os.Symlink(other, dir); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link (to "},
		{"cluster dir is a symlink", func(t *testing.T, dir, other string) {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, filepath.Join(dir, "cluster1")); err != nil {
				t.Fatal(err)
			}
		}, "cluster1 is a symbolic link"},
		{"ca is another user's", func(t *testing.T, dir, other string) {
			needRoot(t)
			// Planted whole: a valid CA, 0666 files, owned by nobody.
			ensure(t, dir)
			chmodFiles(t, dir, 0o666)
			chownAll(t, dir, nobody)
		}, "belongs to uid 65534, not to this user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			other := t.TempDir() // another user's directory, say
			dir := filepath.Join(t.TempDir(), "ca")
			tc.setup(t, dir, other)
			before := readAll(t, other)
			_, err := New(dir).Ensure(clusters...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if after := readAll(t, other); len(after) != len(before) {
				t.Errorf("files written through the link: %d before, %d after", len(before), len(after))
			}
		})
	}
}

// Installing reads cacerts: it refuses a planted file rather than sending it
// to a cluster.
func TestCacertsRefusesPlantedFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ca")
	ensure(t, dir)
	if err := os.Chmod(filepath.Join(dir, "cluster1", CAKeyFile), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := New(dir).Cacerts("cluster1"); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("Cacerts of a world-writable key: %v", err)
	}
}

// The parent of the CA directory decides who can swap it.
func TestEnsureRefusesAnOpenParent(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	if err := os.Chmod(parent, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := New(filepath.Join(parent, "ca")).Ensure(clusters...)
	if err == nil || !strings.Contains(err.Error(), "is writable by others (mode -rwxrwxrwx)") {
		t.Fatalf("error %v", err)
	}
}

// TestLoadCAReadsAMountedSecret loads what Ensure wrote as the signer sees
// it: the cluster's cacerts Secret mounted as a volume, where every file is
// a link into the kubelet's ..data directory. The leaf it issues chains to
// the environment's root.
func TestLoadCAReadsAMountedSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, err := New(filepath.Join(dir, "ca")).Ensure("cluster1")
	if err != nil {
		t.Fatal(err)
	}
	mount := filepath.Join(dir, "mount")
	data := filepath.Join(mount, "..2026_01_01_00_00_00.000000001")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, path := range res.Clusters[0].Files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(mount, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(mount, "..data")); err != nil {
		t.Fatal(err)
	}
	c, err := LoadCA(mount)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := url.Parse("spiffe://cluster.local/ns/default/sa/app")
	leaf, err := c.Issue(id, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rootPEM, err := os.ReadFile(res.Root.Files[RootCertFile])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	inters := x509.NewCertPool()
	for _, der := range leaf.Certificate[1:] {
		ic, _ := x509.ParseCertificate(der)
		inters.AddCert(ic)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the leaf does not chain to the environment's root: %v", err)
	}

	if err := os.Remove(filepath.Join(mount, CertChainFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(mount); err == nil || !strings.Contains(err.Error(), "reading cacerts") || !strings.Contains(err.Error(), CertChainFile) {
		t.Errorf("LoadCA without %s: %v", CertChainFile, err)
	}
}
