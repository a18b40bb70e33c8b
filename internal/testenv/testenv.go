// Package testenv starts a real etcd and kube-apiserver on loopback for integration tests,
// envtest-style, from the binaries `make e2e-env` caches under /var/cache/meshctl:
//
//	cfg := testenv.New(t)          // skips the test when the binaries are not cached
//	cs := kubernetes.NewForConfigOrDie(cfg)
//
// or, outside a test, env, err := testenv.Start(ctx); defer env.Stop().
//
// Everything is private to one call: random free loopback ports, a temp dir, a fresh CA,
// a serving certificate for 127.0.0.1, and an admin client certificate (O=system:masters).
// There is no controller-manager or scheduler: objects are stored and served, not acted on.
// NewWithControllers adds a controller-manager running only named controllers, and
// LoadBalancer stands in for a cloud's load-balancer controller.
package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/meshctl/meshctl/pkg/meshca"
)

// DefaultCache is where `make e2e-env` puts binaries; MESHCTL_CACHE overrides it.
const DefaultCache = "/var/cache/meshctl"

// ErrBinariesMissing is returned (wrapped) by Start when etcd or kube-apiserver is not found.
var ErrBinariesMissing = errors.New("testenv: etcd/kube-apiserver binaries not found; run `make e2e-env` (or set TESTENV_ETCD and TESTENV_KUBE_APISERVER)")

// Env is a running etcd + kube-apiserver pair.
type Env struct {
	Config    *rest.Config  // admin client config (client certificate, system:masters)
	Dir       string        // temp dir with certificates, etcd data and logs
	StartTime time.Duration // from Start to /readyz ok and Service default/kubernetes there

	stopOnce sync.Once
	procs    []*exec.Cmd
	names    []string // each process's name, as its log file's
	waits    []chan error
}

// Binaries returns the etcd and kube-apiserver paths: TESTENV_ETCD / TESTENV_KUBE_APISERVER
// if set, else the newest ones under $MESHCTL_CACHE (default /var/cache/meshctl).
func Binaries() (etcd, apiserver string, err error) {
	cache := os.Getenv("MESHCTL_CACHE")
	if cache == "" {
		cache = DefaultCache
	}
	etcd = os.Getenv("TESTENV_ETCD")
	if etcd == "" {
		etcd = newest(filepath.Join(cache, "bin", "etcd-v*"))
	}
	apiserver = os.Getenv("TESTENV_KUBE_APISERVER")
	if apiserver == "" {
		apiserver = newest(filepath.Join(cache, "k8s", "v*", "bin", "kube-apiserver"))
	}
	for _, p := range []string{etcd, apiserver} {
		if st, e := os.Stat(p); p == "" || e != nil || st.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("%w (looked in %s)", ErrBinariesMissing, cache)
		}
	}
	return etcd, apiserver, nil
}

func newest(glob string) string {
	m, _ := filepath.Glob(glob)
	sort.Strings(m)
	for i := len(m) - 1; i >= 0; i-- {
		if !strings.HasSuffix(m[i], ".tmp") {
			return m[i]
		}
	}
	return ""
}

// New starts an Env for a test and stops it in t.Cleanup. It calls t.Skip when the
// binaries are not cached (run `make e2e-env`) and t.Fatal on any other failure.
func New(t testing.TB) *rest.Config {
	t.Helper()
	if _, _, err := Binaries(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env, err := Start(ctx)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	t.Logf("testenv: etcd + kube-apiserver ready in %s at %s", env.StartTime.Round(time.Millisecond), env.Config.Host)
	return env.Config
}

// errPortTaken marks a start that failed because etcd or kube-apiserver
// found its port taken.
var errPortTaken = errors.New("port taken")

// Start starts etcd and kube-apiserver and waits until /readyz is ok and
// Service default/kubernetes exists (or ctx ends).
//
// The ports come from listening on port 0 and closing the listener, since
// etcd and kube-apiserver take a port only by number: between the close and
// their bind another process (a test package running beside this one) may
// take it. Such a start is retried on new ports, up to three times.
func Start(ctx context.Context) (*Env, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var env *Env
		if env, err = startOnce(ctx); err == nil || !errors.Is(err, errPortTaken) {
			return env, err
		}
	}
	return nil, err
}

func startOnce(ctx context.Context) (_ *Env, err error) {
	t0 := time.Now()
	etcdBin, apiBin, err := Binaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "meshctl-testenv-")
	if err != nil {
		return nil, err
	}
	env := &Env{Dir: dir}
	defer func() {
		if err != nil {
			_ = env.Stop()
		}
	}()
	ports, err := pickPorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	pki, err := writePKI(dir)
	if err != nil {
		return nil, fmt.Errorf("testenv: certificates: %w", err)
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	if err := env.start("etcd", etcdBin,
		"--name=testenv", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=testenv="+peerURL, "--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return nil, err
	}
	if err := env.start("kube-apiserver", apiBin,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--cert-dir="+filepath.Join(dir, "apiserver"),
		"--tls-cert-file="+pki.servingCert, "--tls-private-key-file="+pki.servingKey,
		"--client-ca-file="+pki.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.saKey, "--service-account-signing-key-file="+pki.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC", "--allow-privileged=true",
		"--disable-admission-plugins=ServiceAccount",
		"--endpoint-reconciler-type=none",
		"--v=0",
	); err != nil {
		return nil, err
	}

	cfg := &rest.Config{
		Host: "https://127.0.0.1:" + strconv.Itoa(apiPort),
		TLSClientConfig: rest.TLSClientConfig{
			CAData: pki.caPEM, CertData: pki.adminCertPEM, KeyData: pki.adminKeyPEM,
		},
		QPS: 100, Burst: 200,
	}
	if err := env.waitReady(ctx, cfg); err != nil {
		return nil, err
	}
	env.Config = cfg
	env.StartTime = time.Since(t0)
	return env, nil
}

func (e *Env) start(name, bin string, args ...string) error {
	logf, err := os.OpenFile(filepath.Join(e.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("testenv: start %s: %w", name, err)
	}
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait(); logf.Close(); close(ch) }()
	e.procs = append(e.procs, cmd)
	e.names = append(e.names, name)
	e.waits = append(e.waits, ch)
	return nil
}

func (e *Env) waitReady(ctx context.Context, cfg *rest.Config) error {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	var last string
	readyz := false
	for {
		for i, ch := range e.waits {
			select {
			case werr := <-ch:
				name := filepath.Base(e.procs[i].Path)
				log := tail(filepath.Join(e.Dir, logName(name)), 20)
				if strings.Contains(log, "address already in use") {
					return fmt.Errorf("testenv: %s exited early (%v): %w; log tail:\n%s", name, werr, errPortTaken, log)
				}
				return fmt.Errorf("testenv: %s exited early (%v); log tail:\n%s", name, werr, log)
			default:
			}
		}
		// /readyz turns ok before the apiserver's own controller has created
		// Service default/kubernetes, which every real cluster has and which
		// tests read (the service range is inferred from it): wait for both.
		path := "/readyz"
		if readyz {
			path = "/api/v1/namespaces/default/services/kubernetes"
		}
		resp, err := hc.Get(cfg.Host + path)
		if err == nil {
			b := make([]byte, 512)
			n, _ := resp.Body.Read(b)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusOK && readyz:
				return nil
			case resp.StatusCode == http.StatusOK:
				readyz = true
				continue
			}
			last = fmt.Sprintf("%s: %d %s", path, resp.StatusCode, b[:n])
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: kube-apiserver not ready: %v (last: %s); log tail:\n%s", ctx.Err(), last, tail(filepath.Join(e.Dir, "kube-apiserver.log"), 20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func logName(bin string) string {
	if strings.HasPrefix(bin, "etcd") {
		return "etcd.log"
	}
	return "kube-apiserver.log"
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop terminates kube-apiserver then etcd (SIGTERM, SIGKILL after 10 s) and removes Dir.
// Set TESTENV_KEEP=1 to keep Dir (logs) for debugging.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() {
		for i := len(e.procs) - 1; i >= 0; i-- {
			p, ch := e.procs[i], e.waits[i]
			if p.Process == nil {
				continue
			}
			_ = p.Process.Signal(syscall.SIGTERM)
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				_ = p.Process.Kill()
				<-ch
			}
		}
		if os.Getenv("TESTENV_KEEP") == "" {
			_ = os.RemoveAll(e.Dir)
		}
	})
	return nil
}

// CPU is the CPU time (user + system) each of the environment's processes
// has used so far, by process name ("etcd", "kube-apiserver"), from
// /proc/<pid>/stat: what starting a control plane costs (BenchmarkStart).
// Linux only; the clock tick is taken as 100 Hz (USER_HZ on every Linux
// this runs on: sysconf(_SC_CLK_TCK) would need cgo, which the tests build
// without).
func (e *Env) CPU() (map[string]time.Duration, error) {
	const userHZ = 100
	out := map[string]time.Duration{}
	for k, p := range e.procs {
		name := e.names[k]
		if p.Process == nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Process.Pid))
		if err != nil {
			return nil, fmt.Errorf("testenv: CPU of %s: %w", name, err)
		}
		// The command name (field 2) may hold spaces: the fields after its
		// closing parenthesis start at field 3; utime and stime are 14 and 15.
		i := strings.LastIndexByte(string(data), ')')
		fields := strings.Fields(string(data)[i+1:])
		if i < 0 || len(fields) < 13 {
			return nil, fmt.Errorf("testenv: CPU of %s: unexpected /proc stat %q", name, data)
		}
		var ticks int64
		for _, f := range fields[11:13] {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("testenv: CPU of %s: %w", name, err)
			}
			ticks += n
		}
		out[name] += time.Duration(ticks) * time.Second / userHZ
	}
	return out, nil
}

// pickPorts is freePorts; a test replaces it to hand out a taken port.
var pickPorts = freePorts

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

type pkiFiles struct {
	caCert, servingCert, servingKey, saKey string
	caPEM, adminCertPEM, adminKeyPEM       []byte
}

func writePKI(dir string) (*pkiFiles, error) {
	pdir := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pdir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	ca, err := meshca.NewIssuer(&x509.Certificate{
		Subject:   pkix.Name{CommonName: "meshctl-testenv-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil)
	if err != nil {
		return nil, err
	}
	issue := func(serial int64, cn string, orgs []string, server bool) (certPEM, keyPEM []byte, err error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: orgs},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature,
		}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
			tmpl.DNSNames = []string{"localhost"}
		} else {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &k.PublicKey, ca.Key)
		if err != nil {
			return nil, nil, err
		}
		kd, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), nil
	}
	p := &pkiFiles{
		caCert: filepath.Join(pdir, "ca.crt"), servingCert: filepath.Join(pdir, "apiserver.crt"),
		servingKey: filepath.Join(pdir, "apiserver.key"), saKey: filepath.Join(pdir, "sa.key"),
	}
	p.caPEM = meshca.EncodeCertificates([]*x509.Certificate{ca.Cert})
	srvCert, srvKey, err := issue(2, "kube-apiserver", nil, true)
	if err != nil {
		return nil, err
	}
	if p.adminCertPEM, p.adminKeyPEM, err = issue(3, "testenv-admin", []string{"system:masters"}, false); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	for path, data := range map[string][]byte{
		p.caCert: p.caPEM, p.servingCert: srvCert, p.servingKey: srvKey,
		p.saKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	if _, err := tls.X509KeyPair(p.adminCertPEM, p.adminKeyPEM); err != nil {
		return nil, err
	}
	return p, nil
}
