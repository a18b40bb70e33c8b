package meshca

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshctl/meshctl/internal/fsutil"
)

// mkdir makes dir a private directory of this user, and makes it private
// even if it existed: it holds keys. Its parents (the artifacts and
// environment directories, shared with kubeconfigs and logs) get ordinary
// permissions.
//
// A directory meshctl did not make its own is refused, not repaired: a
// symbolic link would have keys written wherever it points (another user's
// directory), and a directory of another user is theirs to change under
// meshctl — renewing the files in it would not make them ours. The user
// removes it, or chooses another --artifacts directory.
func mkdir(dir string) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("creating CA directory: %w", err)
	}
	if err := checkParent(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating CA directory: %w", err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("CA directory: %w", err)
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(dir)
		return fmt.Errorf("CA directory %s is a symbolic link (to %s): refusing to keep keys where it points; remove the link, and meshctl makes a private directory", dir, target)
	case !st.IsDir():
		return fmt.Errorf("CA directory %s is not a directory (%s): remove it", dir, st.Mode().Type())
	}
	if uid, ok := owner(st); ok && uid != os.Geteuid() {
		return fmt.Errorf("CA directory %s belongs to uid %d, not to this user (uid %d): refusing to trust or write keys in it; remove it, or use another --artifacts directory", dir, uid, os.Geteuid())
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("securing CA directory: %w", err)
		}
	}
	return nil
}

// checkParent refuses a parent directory in which another user can rename
// the CA directory away and put their own in its place between meshctl's
// check and its writes: one writable by group or others, unless it has the
// sticky bit (as /tmp has) and belongs to this user or root.
func checkParent(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("CA directory's parent: %w", err)
	}
	uid, ok := owner(st)
	if !ok {
		return nil
	}
	if uid != os.Geteuid() && uid != 0 {
		return fmt.Errorf("the CA directory's parent %s belongs to uid %d, who could replace the CA directory: use an --artifacts directory of your own", dir, uid)
	}
	if st.Mode().Perm()&0o022 != 0 && st.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("the CA directory's parent %s is writable by others (mode %s), who could replace the CA directory: chmod go-w %s", dir, st.Mode().Perm(), dir)
	}
	return nil
}

// checkFile says why an existing CA file cannot be trusted: a symbolic
// link (its contents are wherever it points), another user's file, one
// others may write (they chose the CA), or a key others may read (they hold
// the CA). Such files are renewed, not refused: the directory is this
// user's and private, and renewal replaces each file by a rename, which
// neither follows a link nor writes into another user's file.
func checkFile(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	name := filepath.Base(path)
	mode := st.Mode()
	switch {
	case mode&fs.ModeSymlink != 0:
		return invalidf("%s is a symbolic link", name)
	case !mode.IsRegular():
		return invalidf("%s is not a regular file (%s)", name, mode.Type())
	}
	if uid, ok := owner(st); ok && uid != os.Geteuid() {
		return invalidf("%s belongs to uid %d, not to this user (uid %d)", name, uid, os.Geteuid())
	}
	if mode.Perm()&0o022 != 0 {
		return invalidf("%s is writable by others (mode %s)", name, mode.Perm())
	}
	if isKey(name) && mode.Perm()&0o044 != 0 {
		return invalidf("%s is a private key readable by others (mode %s)", name, mode.Perm())
	}
	return nil
}

func isKey(name string) bool { return name == CAKeyFile || name == RootKeyFile }

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return fsutil.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// Cacerts are the contents of a cluster's cacerts files, keyed as Istio's
// cacerts Secret is.
type Cacerts map[string][]byte

// cacertsFiles are the files of Istio's cacerts layout.
var cacertsFiles = []string{CACertFile, CAKeyFile, RootCertFile, CertChainFile}

// Cacerts reads a cluster's files, as Ensure left them.
func (a *Authority) Cacerts(cluster string) (Cacerts, error) {
	dir := filepath.Join(a.dir, cluster)
	for _, d := range []string{a.dir, dir} {
		if err := checkOwnDir(d); err != nil {
			return nil, fmt.Errorf("reading %s's cacerts (run meshctl ca): %w", cluster, err)
		}
	}
	var distrusted error
	out, err := readCacerts(dir, func(path string) error {
		if err := checkFile(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			distrusted = err
			return err
		}
		return nil
	})
	switch {
	case distrusted != nil:
		return nil, fmt.Errorf("reading %s's cacerts (run meshctl ca to renew it): %w", cluster, distrusted)
	case err != nil:
		return nil, fmt.Errorf("reading %s's cacerts (run meshctl ca): %w", cluster, err)
	}
	return out, nil
}

// LoadCA loads the signing CA from a cluster's cacerts files in dir, as its
// istio-system/cacerts Secret is mounted in a pod. Unlike Authority.Cacerts
// it takes the files as they are: a Secret volume is the kubelet's (root's,
// its files links into a timestamped directory), not this user's.
func LoadCA(dir string) (*CA, error) {
	certs, err := readCacerts(dir, nil)
	if err != nil {
		return nil, fmt.Errorf("reading cacerts: %w", err)
	}
	c, err := FromPEM(certs[CACertFile], certs[CAKeyFile], certs[CertChainFile], certs[RootCertFile])
	if err != nil {
		return nil, fmt.Errorf("cacerts in %s: %w", dir, err)
	}
	return c, nil
}

// readCacerts reads the cacerts files in dir, each after check (if any)
// accepts its path.
func readCacerts(dir string, check func(path string) error) (Cacerts, error) {
	out := Cacerts{}
	for _, name := range cacertsFiles {
		path := filepath.Join(dir, name)
		if check != nil {
			if err := check(path); err != nil {
				return nil, err
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

// checkOwnDir is mkdir's check of an existing directory, for readers: a
// private directory of this user, not a link.
func checkOwnDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st.Mode()&fs.ModeSymlink != 0 || !st.IsDir() {
		return fmt.Errorf("%s is not a directory (%s)", dir, st.Mode().Type())
	}
	if uid, ok := owner(st); ok && uid != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to this user (uid %d)", dir, uid, os.Geteuid())
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is open to others (mode %s)", dir, st.Mode().Perm())
	}
	return nil
}
