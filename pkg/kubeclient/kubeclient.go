// Package kubeclient is the one way meshctl gets clients for a cluster: from
// a kubeconfig file (path and context), kubeconfig bytes, a rest.Config or,
// in a pod, the pod's service account, to the rest.Config, a typed client
// and a dynamic client, each built once (helm's RESTClientGetter plays this part for helm). A Factory keeps them
// across calls, keyed by the kubeconfig's content, so that the clients of a
// cluster are built once per run however many steps use it, and a cluster
// recreated with a new kubeconfig never gets a stale one.
package kubeclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/meshctl/meshctl/internal/syncbuf"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Option adjusts the rest.Config the clients are built from.
type Option func(*settings)

type settings struct {
	timeout    time.Duration
	qps        float32
	burst      int
	noWarnings bool
}

// WithTimeout bounds every request (rest.Config.Timeout): for callers that
// would rather report an API server that does not answer than wait on it.
func WithTimeout(d time.Duration) Option { return func(s *settings) { s.timeout = d } }

// WithRateLimit sets the client-side rate limit (client-go's default is 5
// QPS, burst 10, which makes concurrent callers wait on each other).
func WithRateLimit(qps float32, burst int) Option {
	return func(s *settings) { s.qps, s.burst = qps, burst }
}

// WithCommandRateLimit is the rate limit of a command's clients: 50 QPS,
// burst 100. Under client-go's default a command waits on itself: up's
// MetalLB step applies some 30 objects to each cluster one after another,
// and past the burst of 10 every request waited 200 ms for a token, which
// made a rerun that changes nothing take 4.3 s in that step against 0.6 s
// of requests (MESHCTL_TRACE, two clusters). Each command's requests are
// few and mostly sequential: this removes the wait, not the bound.
func WithCommandRateLimit() Option { return WithRateLimit(50, 100) }

// WithoutWarnings drops the API server's warnings (deprecated types a
// discovery-driven list touches, say) instead of logging them.
func WithoutWarnings() Option { return func(s *settings) { s.noWarnings = true } }

func (s settings) apply(cfg *rest.Config) {
	if s.timeout > 0 {
		cfg.Timeout = s.timeout
	}
	if s.qps > 0 {
		cfg.QPS, cfg.Burst = s.qps, s.burst
	}
	if s.noWarnings {
		cfg.WarningHandler = rest.NoWarnings{}
	}
}

func (s settings) String() string {
	return fmt.Sprintf("%s/%g/%d/%t", s.timeout, s.qps, s.burst, s.noWarnings)
}

func resolve(opts []Option) settings {
	var s settings
	for _, o := range opts {
		o(&s)
	}
	return s
}

// Getter gives one cluster's rest.Config and clients, each built on first
// use and kept. It is safe for concurrent use.
type Getter struct {
	load func() (*rest.Config, error)
	s    settings

	mu   sync.Mutex
	done bool
	cfg  *rest.Config
	err  error
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

func newGetter(load func() (*rest.Config, error), opts []Option) *Getter {
	return &Getter{load: load, s: resolve(opts)}
}

// FromFile reads the kubeconfig at path, with context (empty: its
// current-context) — as kubectl --kubeconfig path --context context does;
// relative certificate paths are resolved against the file's directory.
func FromFile(path, context string, opts ...Option) *Getter {
	return newGetter(func() (*rest.Config, error) { return fileConfig(path, context) }, opts)
}

func fileConfig(path, context string) (*rest.Config, error) {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
		&clientcmd.ConfigOverrides{CurrentContext: context},
	).ClientConfig()
}

// FromBytes parses a kubeconfig, with context (empty: its current-context).
func FromBytes(kubeconfig []byte, context string, opts ...Option) *Getter {
	return newGetter(func() (*rest.Config, error) { return bytesConfig(kubeconfig, context) }, opts)
}

func bytesConfig(kubeconfig []byte, context string) (*rest.Config, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	return clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
}

// FromAPIConfig uses a kubeconfig already loaded, with context (empty: its
// current-context).
func FromAPIConfig(cfg clientcmdapi.Config, context string, opts ...Option) *Getter {
	return newGetter(func() (*rest.Config, error) {
		return clientcmd.NewDefaultClientConfig(cfg, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	}, opts)
}

// InCluster uses the pod's service account (rest.InClusterConfig): for the
// dataplane's commands, which run in pods. Outside a pod its errors are
// rest.ErrNotInCluster.
func InCluster(opts ...Option) *Getter {
	return newGetter(rest.InClusterConfig, opts)
}

// FromConfig uses a rest.Config (a copy: the caller's is never changed).
func FromConfig(cfg *rest.Config, opts ...Option) *Getter {
	return newGetter(func() (*rest.Config, error) { return rest.CopyConfig(cfg), nil }, opts)
}

// restConfig is the shared config, loaded once; callers must not change it.
func (g *Getter) restConfig() (*rest.Config, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done {
		g.cfg, g.err = g.load()
		if g.err == nil {
			g.s.apply(g.cfg)
		}
		g.done = true
	}
	return g.cfg, g.err
}

// RESTConfig is the cluster's rest.Config, a copy the caller may change.
// Its errors are clientcmd's, as they are: callers say which cluster.
func (g *Getter) RESTConfig() (*rest.Config, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, err
	}
	return rest.CopyConfig(cfg), nil
}

// Host is the API server's URL (empty when the kubeconfig cannot be read).
func (g *Getter) Host() string {
	cfg, err := g.restConfig()
	if err != nil {
		return ""
	}
	return cfg.Host
}

// Kubernetes is the typed client.
func (g *Getter) Kubernetes() (kubernetes.Interface, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.kube == nil {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		g.kube = cs
	}
	return g.kube, nil
}

// Dynamic is the dynamic client.
func (g *Getter) Dynamic() (dynamic.Interface, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dyn == nil {
		d, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		g.dyn = d
	}
	return g.dyn, nil
}

// Discovery is a discovery client, new on every call: callers cache what
// they discover (a RESTMapper) themselves.
func (g *Getter) Discovery() (*discovery.DiscoveryClient, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, err
	}
	return discovery.NewDiscoveryClientForConfig(cfg)
}

// Exec runs argv in container of pod (in namespace) through the API server,
// as kubectl exec does, and returns what it printed. Its error is
// client-go's as it is: a command that ran and exited non-zero gives one
// with an ExitStatus() int method (exec.CodeExitError); callers say which
// pod. The buffers take concurrent writes: when ctx ends, the stream's
// copiers may still be writing as Exec returns.
func (g *Getter) Exec(ctx context.Context, namespace, pod, container string, argv ...string) (stdout, stderr string, err error) {
	cfg, err := g.restConfig()
	if err != nil {
		return "", "", err
	}
	cs, err := g.Kubernetes()
	if err != nil {
		return "", "", err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	var out, errOut syncbuf.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), err
}

// Factory keeps a Getter per kubeconfig, so that every step of a run shares
// one cluster's clients. A nil *Factory works and keeps nothing.
type Factory struct {
	opts []Option

	mu      sync.Mutex
	getters map[string]*Getter
}

// NewFactory returns a Factory whose clients all have opts (each call's own
// options come after these).
func NewFactory(opts ...Option) *Factory {
	return &Factory{opts: opts, getters: map[string]*Getter{}}
}

// File is FromFile, kept while the file's content stays the same. A file
// that cannot be read gets a Getter that reports why (and is not kept).
func (f *Factory) File(path, context string, opts ...Option) *Getter {
	all := f.all(opts)
	if f == nil {
		return FromFile(path, context, all...)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return FromFile(path, context, all...)
	}
	return f.get("file", path, context, data, all, func() *Getter { return FromFile(path, context, all...) })
}

// Bytes is FromBytes, kept per content.
func (f *Factory) Bytes(kubeconfig []byte, context string, opts ...Option) *Getter {
	all := f.all(opts)
	if f == nil {
		return FromBytes(kubeconfig, context, all...)
	}
	return f.get("bytes", "", context, kubeconfig, all, func() *Getter { return FromBytes(kubeconfig, context, all...) })
}

func (f *Factory) all(opts []Option) []Option {
	if f == nil {
		return opts
	}
	return append(append([]Option{}, f.opts...), opts...)
}

func (f *Factory) get(kind, path, context string, content []byte, opts []Option, mk func() *Getter) *Getter {
	sum := sha256.Sum256(content)
	key := kind + "\x00" + path + "\x00" + context + "\x00" + hex.EncodeToString(sum[:]) + "\x00" + resolve(opts).String()
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.getters[key]
	if !ok {
		g = mk()
		f.getters[key] = g
	}
	return g
}
