package installcni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
)

// Installer installs the plugin and keeps it installed.
type Installer struct {
	confDir, hostConfDir string
	binDir               string
	binary               string
	saDir                string
	server               string
	pluginType           string
	pluginConfig         ambient.PluginConfig
	throttle             time.Duration
	upgrading            func() bool
	log                  *slog.Logger
	readyAddr            string

	ready   atomic.Bool
	waiting bool // said "waiting" once; say it again only after a config came and went

	lastWrite time.Time
	fights    int // consecutive repairs, each soon after the previous one
}

// Option configures an Installer.
type Option func(*Installer)

// WithCNIConfDir is the host's CNI config dir as mounted in this container.
func WithCNIConfDir(dir string) Option { return func(i *Installer) { i.confDir = dir } }

// WithHostCNIConfDir is the same dir as the host (and so the plugin) sees it;
// the plugin's kubeconfig path in the config entry is under it.
func WithHostCNIConfDir(dir string) Option { return func(i *Installer) { i.hostConfDir = dir } }

// WithCNIBinDir is the host's CNI bin dir as mounted in this container.
func WithCNIBinDir(dir string) Option { return func(i *Installer) { i.binDir = dir } }

// WithPluginBinary is the binary to install (default: this executable, the
// single meshctl binary that also serves as the plugin).
func WithPluginBinary(path string) Option { return func(i *Installer) { i.binary = path } }

// WithAgentSocket sets the node agent socket the plugin asks to add pods.
func WithAgentSocket(path string) Option {
	return func(i *Installer) { i.pluginConfig.AgentSocket = path }
}

// WithExcludeNamespaces sets namespaces whose pods the plugin passes through
// without asking anyone (default: kube-system).
func WithExcludeNamespaces(ns ...string) Option {
	return func(i *Installer) { i.pluginConfig.ExcludeNamespaces = ns }
}

// WithServiceAccountDir is where the service account token and CA are mounted.
func WithServiceAccountDir(dir string) Option { return func(i *Installer) { i.saDir = dir } }

// WithAPIServer sets the API server URL written into the plugin's kubeconfig
// (default: from KUBERNETES_SERVICE_HOST and _PORT).
func WithAPIServer(url string) Option { return func(i *Installer) { i.server = url } }

// WithRepairThrottle sets the minimum time between two repairs of the config.
func WithRepairThrottle(d time.Duration) Option { return func(i *Installer) { i.throttle = d } }

// WithUpgradeCheck is asked on exit; while it reports true the plugin stays
// installed, so pods keep being meshed while the DaemonSet rolls.
func WithUpgradeCheck(f func() bool) Option { return func(i *Installer) { i.upgrading = f } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(i *Installer) { i.log = l } }

// WithReadyAddr serves GET /readyz on addr while Run runs: 200 while the
// plugin is chained, 503 otherwise, for the container's readiness probe.
func WithReadyAddr(addr string) Option { return func(i *Installer) { i.readyAddr = addr } }

// kubeconfigName has no config extension, so libcni never reads it as one.
const kubeconfigName = "meshctl-cni-kubeconfig"

// errChangedUnderUs: the config changed between our read and our write.
var errChangedUnderUs = errors.New("CNI config changed while being repaired")

// fightThreshold is how many back-to-back repairs mean someone else keeps
// undoing ours.
const fightThreshold = 3

// New returns an Installer with the paths of the dataplane DaemonSet.
func New(opts ...Option) *Installer {
	i := &Installer{
		confDir:      "/host/etc/cni/net.d",
		hostConfDir:  "/etc/cni/net.d",
		binDir:       "/host/opt/cni/bin",
		saDir:        "/var/run/secrets/kubernetes.io/serviceaccount",
		pluginType:   ambient.DefaultPluginType,
		pluginConfig: ambient.PluginConfig{AgentSocket: ambient.DefaultAgentSocket, ExcludeNamespaces: ambient.DefaultExcludedNamespaces},
		throttle:     time.Second,
		upgrading:    func() bool { return false },
		log:          slog.Default(),
	}
	if h, p := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"); h != "" && p != "" {
		i.server = "https://" + net.JoinHostPort(h, p)
	}
	for _, o := range opts {
		o(i)
	}
	return i
}

// Run installs with New(opts...) and blocks until ctx ends.
func Run(ctx context.Context, opts ...Option) error {
	return New(opts...).Run(ctx)
}

// Ready reports whether the primary CNI config currently chains our plugin;
// the container's readiness probe should follow it.
func (i *Installer) Ready() bool { return i.ready.Load() }

func (i *Installer) binPath() string        { return filepath.Join(i.binDir, i.pluginType) }
func (i *Installer) kubeconfigPath() string { return filepath.Join(i.confDir, kubeconfigName) }

// entry is our plugin's object in the conflist.
func (i *Installer) entry() (map[string]any, error) {
	c := i.pluginConfig
	c.Kubernetes.Kubeconfig = filepath.Join(i.hostConfDir, kubeconfigName)
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encoding plugin config: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("encoding plugin config: %w", err)
	}
	m["type"] = i.pluginType
	return m, nil
}

// Run installs the plugin, then watches and repairs until ctx ends, then
// uninstalls (unless an upgrade is under way).
func (i *Installer) Run(ctx context.Context) (err error) {
	entry, err := i.entry()
	if err != nil {
		return err
	}
	if i.binary == "" {
		if i.binary, err = os.Executable(); err != nil {
			return fmt.Errorf("finding own binary: %w", err)
		}
	}
	if i.readyAddr != "" {
		stop, err := i.serveReady(i.readyAddr)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := os.MkdirAll(i.confDir, 0o755); err != nil {
		return fmt.Errorf("creating CNI config dir: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("starting file watcher: %w", err)
	}
	defer w.Close()
	// Watch before the first write, so no change between them is missed.
	for _, d := range []string{i.confDir, i.saDir} {
		if err := w.Add(d); err != nil {
			return fmt.Errorf("watching %s: %w", d, err)
		}
	}
	defer func() {
		i.ready.Store(false)
		if i.upgrading() {
			i.log.Info("upgrade in progress: leaving the CNI plugin installed")
			return
		}
		if cerr := i.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	for _, d := range []string{i.binDir, i.confDir} {
		if err := removeStaleTemps(d); err != nil {
			return err
		}
	}
	if err := copyAtomic(i.binary, i.binPath()); err != nil {
		return fmt.Errorf("installing plugin binary: %w", err)
	}
	if err := i.writeKubeconfig(); err != nil {
		return err
	}
	i.reconcile(entry)

	var (
		repair  = time.NewTimer(0)
		pending bool
	)
	<-repair.C
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			i.log.Warn("file watch error", "err", err)
		case ev := <-w.Events:
			if filepath.Dir(ev.Name) == filepath.Clean(i.saDir) {
				if err := i.writeKubeconfig(); err != nil {
					i.log.Warn("refreshing plugin kubeconfig", "err", err)
				}
				continue
			}
			if strings.HasPrefix(filepath.Base(ev.Name), tmpPrefix) || ev.Name == i.kubeconfigPath() {
				continue // our own writes in flight
			}
			i.check(entry)
			if !pending {
				pending = true
				repair.Reset(max(0, i.throttle-time.Since(i.lastWrite)))
			}
		case <-repair.C:
			pending = false
			i.reconcile(entry)
		}
	}
}

// check updates readiness at once, even while a repair is throttled.
func (i *Installer) check(entry map[string]any) {
	p, err := primaryConfig(i.confDir)
	if err != nil || p == "" {
		i.ready.Store(false)
		return
	}
	data, err := os.ReadFile(p)
	i.ready.Store(err == nil && isList(p) && hasEntry(data, entry))
}

// reconcile makes the primary config chain our plugin, writing only when it
// does not already: our own write then echoes as a no-op.
func (i *Installer) reconcile(entry map[string]any) {
	wrote, err := i.ensureConfig(entry)
	if errors.Is(err, errChangedUnderUs) {
		// The other writer is mid-change; its write will notify us again.
		i.ready.Store(false)
		return
	}
	if err != nil {
		i.ready.Store(false)
		i.log.Error("repairing CNI config", "err", err)
		return
	}
	if !wrote {
		return
	}
	if time.Since(i.lastWrite) < 2*i.throttle+time.Second {
		i.fights++
	} else {
		i.fights = 0
	}
	i.lastWrite = time.Now()
	if i.fights == fightThreshold {
		i.log.Warn("another writer keeps removing the plugin from the CNI config; repairs are throttled",
			"dir", i.confDir, "every", i.throttle)
	}
}

func (i *Installer) ensureConfig(entry map[string]any) (wrote bool, err error) {
	p, err := primaryConfig(i.confDir)
	if err != nil {
		return false, err
	}
	if p == "" {
		i.ready.Store(false)
		if !i.waiting {
			i.waiting = true
			i.log.Info("no primary CNI config yet; waiting for the cluster's CNI to write one", "dir", i.confDir)
		}
		return false, nil
	}
	i.waiting = false
	data, err := os.ReadFile(p)
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", p, err)
	}
	if isList(p) && hasEntry(data, entry) {
		i.ready.Store(true)
		return false, nil
	}
	out, err := injectEntry(data, isList(p), entry)
	if err != nil {
		return false, fmt.Errorf("adding plugin to %s: %w", p, err)
	}
	st, err := os.Stat(p)
	if err != nil {
		return false, fmt.Errorf("reading mode of %s: %w", p, err)
	}
	dst := p
	if !isList(p) {
		dst = strings.TrimSuffix(p, filepath.Ext(p)) + ".conflist"
	}
	unchanged := func() error {
		now, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(now, data) {
			return fmt.Errorf("%s: %w", p, errChangedUnderUs)
		}
		return nil
	}
	if err := writeAtomicIf(dst, out, st.Mode().Perm(), unchanged); err != nil {
		return false, err
	}
	if dst != p {
		// The single conf would otherwise sort first and win over ours.
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return true, fmt.Errorf("removing %s after wrapping it: %w", p, err)
		}
	}
	i.ready.Store(true)
	i.log.Info("CNI plugin chained", "config", dst)
	return true, nil
}

// writeKubeconfig (re)writes the plugin's kubeconfig, 0600 since it holds a
// token, and only when its content changed.
func (i *Installer) writeKubeconfig() error {
	data, err := kubeconfig(i.saDir, i.server)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(i.kubeconfigPath()); err == nil && string(old) == string(data) {
		return nil
	}
	if err := writeAtomic(i.kubeconfigPath(), data, 0o600); err != nil {
		return fmt.Errorf("writing plugin kubeconfig: %w", err)
	}
	return nil
}

// cleanup takes our entry out of every conflist, then the kubeconfig and
// the binary. The entry goes first: a config naming a missing plugin would
// fail every pod on the node.
func (i *Installer) cleanup() error {
	var errs []error
	entries, err := os.ReadDir(i.confDir)
	if err != nil {
		errs = append(errs, fmt.Errorf("listing CNI config dir: %w", err))
	}
	for _, e := range entries {
		p := filepath.Join(i.confDir, e.Name())
		if !isList(p) {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		out, changed, err := removeEntry(data, i.pluginType)
		if err != nil || !changed {
			continue
		}
		st, err := os.Stat(p)
		if err == nil {
			err = writeAtomic(p, out, st.Mode().Perm())
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing plugin from %s: %w", p, err))
		}
	}
	for _, p := range []string{i.kubeconfigPath(), i.binPath()} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("uninstalling CNI plugin: %w", err)
	}
	i.log.Info("CNI plugin uninstalled")
	return nil
}

// ReadyHandler answers 200 while Ready, 503 otherwise.
func (i *Installer) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !i.Ready() {
			http.Error(w, "CNI plugin not chained in the primary CNI config", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

func (i *Installer) serveReady(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving readiness: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", i.ReadyHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // returns ErrServerClosed on stop
	return func() { _ = srv.Close() }, nil
}
