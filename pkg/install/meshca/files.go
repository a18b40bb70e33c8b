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
	return fsutil.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
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
