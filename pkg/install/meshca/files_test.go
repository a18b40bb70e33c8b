package meshca

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
