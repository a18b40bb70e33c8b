package meshca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var clusters = []string{"cluster1", "cluster2"}

func ensure(t *testing.T, dir string, opts ...Option) *Result {
	t.Helper()
	res, err := New(dir, opts...).Ensure(clusters...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[strings.TrimPrefix(p, dir)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func parseCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func actions(r *Result) string {
	s := []string{"root=" + r.Root.Action}
	for _, c := range r.Clusters {
		s = append(s, c.Cluster+"="+c.Action)
	}
	return strings.Join(s, " ")
}

// TestEnsureCreatesIstioCacerts checks the layout, the modes, the
// certificates' shape, and that the dataplane's CA loads every cluster's
// files and issues workload certificates that verify against the root.
func TestEnsureCreatesIstioCacerts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "default", "ca")
	res := ensure(t, dir, WithName("default"))
	if got := actions(res); got != "root=created cluster1=created cluster2=created" {
		t.Errorf("actions: %s", got)
	}
	modes := map[string]os.FileMode{
		"": 0o700, "/cluster1": 0o700, "/cluster2": 0o700,
		"/root-key.pem": 0o600, "/cluster1/ca-key.pem": 0o600, "/cluster2/ca-key.pem": 0o600,
		"/root-cert.pem": 0o644, "/cluster1/cert-chain.pem": 0o644,
	}
	for p, want := range modes {
		st, err := os.Stat(dir + p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, st.Mode().Perm(), want)
		}
	}
	if n := len(readAll(t, dir)); n != 2+4*len(clusters) {
		t.Errorf("%d files, want %d (no temporary files left)", n, 2+4*len(clusters))
	}

	root := parseCert(t, filepath.Join(dir, RootCertFile))
	if life := time.Until(root.NotAfter); life < DefaultRootLifetime-time.Hour || life > DefaultRootLifetime {
		t.Errorf("root lifetime %s", life)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	for _, c := range clusters {
		cdir := filepath.Join(dir, c)
		inter := parseCert(t, filepath.Join(cdir, CACertFile))
		if !inter.IsCA || inter.MaxPathLen != 0 || !inter.MaxPathLenZero || inter.KeyUsage&x509.KeyUsageCertSign == 0 {
			t.Errorf("%s: not a CA limited to leaves: IsCA %v MaxPathLen %d zero %v usage %b", c, inter.IsCA, inter.MaxPathLen, inter.MaxPathLenZero, inter.KeyUsage)
		}
		if len(inter.PermittedDNSDomains)+len(inter.PermittedURIDomains)+len(inter.ExcludedDNSDomains) > 0 {
			t.Errorf("%s: has name constraints", c)
		}
		if !strings.Contains(inter.Subject.String(), c) {
			t.Errorf("%s: subject %q does not name the cluster", c, inter.Subject)
		}
		if k, ok := inter.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
			t.Errorf("%s: key is not ECDSA P-256", c)
		}
		if life := time.Until(inter.NotAfter); life < DefaultIntermediateLifetime-time.Hour || life > DefaultIntermediateLifetime {
			t.Errorf("%s: lifetime %s", c, life)
		}
		if _, err := inter.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s: intermediate does not chain to the root: %v", c, err)
		}

		certs, err := New(dir).Cacerts(c)
		if err != nil {
			t.Fatal(err)
		}
		if want := append(append([]byte{}, certs[CACertFile]...), certs[RootCertFile]...); !bytes.Equal(certs[CertChainFile], want) {
			t.Errorf("%s: cert-chain.pem is not the intermediate then the root", c)
		}
		wca, err := FromPEM(certs[CACertFile], certs[CAKeyFile], certs[CertChainFile], certs[RootCertFile])
		if err != nil {
			t.Fatalf("%s: dataplane CA cannot load the files: %v", c, err)
		}
		id, _ := url.Parse("spiffe://cluster.local/ns/default/sa/" + c)
		leaf, err := wca.Issue(id, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatalf("%s: issue: %v", c, err)
		}
		inters := x509.NewCertPool()
		for _, der := range leaf.Certificate[1:] {
			ic, _ := x509.ParseCertificate(der)
			inters.AddCert(ic)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("%s: workload certificate does not verify against the root: %v", c, err)
		}
	}
}

func TestEnsureReusesAndRotates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ensure(t, dir)
	first := readAll(t, dir)
	res := ensure(t, dir)
	if got := actions(res); got != "root=reused cluster1=reused cluster2=reused" {
		t.Errorf("re-run: %s", got)
	}
	if again := readAll(t, dir); !equalFiles(first, again) {
		t.Error("a re-run changed the files")
	}
	// A cluster added later gets an intermediate under the same root.
	res, err := New(dir).Ensure("cluster1", "cluster2", "cluster3")
	if err != nil || actions(res) != "root=reused cluster1=reused cluster2=reused cluster3=created" {
		t.Errorf("adding a cluster: %v %v", actions(res), err)
	}

	res = ensure(t, dir, WithRotate(true))
	if got := actions(res); got != "root=rotated cluster1=rotated cluster2=rotated" {
		t.Errorf("rotate: %s", got)
	}
	rotated := readAll(t, dir)
	for name, b := range first {
		if bytes.Equal(rotated[name], b) {
			t.Errorf("%s unchanged by rotation", name)
		}
	}
	if got := actions(ensure(t, dir)); got != "root=reused cluster1=reused cluster2=reused" {
		t.Errorf("after rotation: %s", got)
	}
}

func equalFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(b[k], v) {
			return false
		}
	}
	return true
}

// TestEnsureRenewsWhatCannotBeKept: every kind of damage is renewed, and the
// result says what was wrong.
func TestEnsureRenewsWhatCannotBeKept(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		damage func(dir string) error
		clock  time.Duration // how far to move the clock for the second run
		want   string
		reason string
	}{
		{"corrupt intermediate", func(d string) error {
			return os.WriteFile(filepath.Join(d, "cluster1", CACertFile), []byte("garbage"), 0o644)
		},
			0, "root=reused cluster1=renewed cluster2=reused", "ca-cert.pem holds no PEM certificate"},
		{"missing key", func(d string) error { return os.Remove(filepath.Join(d, "cluster2", CAKeyFile)) },
			0, "root=reused cluster1=reused cluster2=renewed", "ca-key.pem is missing"},
		{"swapped keys", func(d string) error {
			b, _ := os.ReadFile(filepath.Join(d, "cluster2", CAKeyFile))
			return os.WriteFile(filepath.Join(d, "cluster1", CAKeyFile), b, 0o600)
		}, 0, "root=reused cluster1=renewed cluster2=reused", "ca-key.pem does not match ca-cert.pem"},
		{"wrong chain", func(d string) error {
			return os.WriteFile(filepath.Join(d, "cluster1", CertChainFile), []byte{}, 0o644)
		},
			0, "root=reused cluster1=renewed cluster2=reused", "cert-chain.pem is not ca-cert.pem followed by the root"},
		{"corrupt root key", func(d string) error {
			return os.WriteFile(filepath.Join(d, RootKeyFile), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600)
		},
			0, "root=renewed cluster1=renewed cluster2=renewed", "root-key.pem: not a PKCS#8, EC or PKCS#1 private key"},
		{"intermediates in their last third", nil,
			4 * 365 * 24 * time.Hour, "root=reused cluster1=renewed cluster2=renewed", "within the last third of its lifetime"},
		{"root expired", nil,
			11 * 365 * 24 * time.Hour, "root=renewed cluster1=renewed cluster2=renewed", "root-cert.pem expired at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ensure(t, dir)
			if tt.damage != nil {
				if err := tt.damage(dir); err != nil {
					t.Fatal(err)
				}
			}
			later := time.Now().Add(tt.clock)
			res := ensure(t, dir, WithClock(func() time.Time { return later }))
			if got := actions(res); got != tt.want {
				t.Errorf("actions %s, want %s", got, tt.want)
			}
			var reasons []string
			for _, f := range append([]Files{res.Root}, res.Clusters...) {
				reasons = append(reasons, f.Reason)
			}
			if !strings.Contains(strings.Join(reasons, "; "), tt.reason) {
				t.Errorf("reasons %q lack %q", reasons, tt.reason)
			}
			// What was renewed is valid at that time: a third run reuses all.
			res = ensure(t, dir, WithClock(func() time.Time { return later }))
			if got := actions(res); got != "root=reused cluster1=reused cluster2=reused" {
				t.Errorf("third run: %s", got)
			}
		})
	}
}

func TestEnsureBadInput(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		opts     []Option
		clusters []string
		want     string
	}{
		{nil, []string{"../x"}, `cluster name "../x" cannot name a CA directory`},
		{nil, []string{"a", "a"}, `cluster name "a"`},
		{[]Option{WithIntermediateLifetime(0)}, nil, "CA lifetimes must be positive"},
		// Expired before the run that made it ends.
		{[]Option{WithRootLifetime(time.Nanosecond)}, nil, "CA lifetimes must be positive and at least 1h0m0s, got root 1ns"},
		{[]Option{WithIntermediateLifetime(59 * time.Minute)}, nil, "intermediate 59m0s"},
	} {
		if _, err := New(t.TempDir(), tt.opts...).Ensure(tt.clusters...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.clusters, err, tt.want)
		}
	}
	if _, err := New(t.TempDir()).Cacerts("cluster1"); err == nil || !strings.Contains(err.Error(), "run meshctl ca") {
		t.Errorf("Cacerts before Ensure: %v", err)
	}
}

func TestEnsureReportsUnreadableFiles(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root reads any file")
	}
	dir := t.TempDir()
	ensure(t, dir)
	if err := os.Chmod(filepath.Join(dir, RootKeyFile), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := New(dir).Ensure(clusters...); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("unreadable root key: %v", err)
	}
}
