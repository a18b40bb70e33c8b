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
)

// mkdir makes dir, and makes it private even if it existed: it holds keys.
// Its parents (the artifacts and environment directories, shared with
// kubeconfigs and logs) get ordinary permissions.
func mkdir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("creating CA directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating CA directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("securing CA directory: %w", err)
	}
	return nil
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// writeFile replaces path atomically: a reader (or a crash) sees the old
// file or the new one, never half of one. The temporary file gets its final
// mode before any byte is written, so a key is never readable by others.
func writeFile(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// Make the rename itself durable.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Cacerts are the contents of a cluster's cacerts files, keyed as Istio's
// cacerts Secret is.
type Cacerts map[string][]byte

// Cacerts reads a cluster's files, as Ensure left them.
func (a *Authority) Cacerts(cluster string) (Cacerts, error) {
	out := Cacerts{}
	for _, name := range []string{CACertFile, CAKeyFile, RootCertFile, CertChainFile} {
		b, err := os.ReadFile(filepath.Join(a.dir, cluster, name))
		if err != nil {
			return nil, fmt.Errorf("reading %s's cacerts (run meshctl ca): %w", cluster, err)
		}
		out[name] = b
	}
	return out, nil
}
