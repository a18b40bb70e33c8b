package check

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// Source gives an environment's clusters and their kubeconfigs;
// cluster.Provider is one.
type Source interface {
	Environment(ctx context.Context, env string) ([]model.ClusterState, error)
	ClusterKubeconfig(ctx context.Context, c model.ClusterPlan, internal bool) ([]byte, error)
}

// Defaults.
const (
	// DefaultImage is the test image `make e2e-env` preloads into kind
	// nodes; any image with busybox's sh and nc works.
	DefaultImage     = "meshctl/busybox:latest"
	DefaultNamespace = "meshctl-check"
	// DefaultTimeout bounds each wait: pods start slowly on a busy machine.
	DefaultTimeout = 3 * time.Minute
	// Port the server pods listen on.
	Port = 8080
)

// apiProbeTimeout bounds the question "does the API server answer?".
const apiProbeTimeout = 10 * time.Second

// Paths a probe takes.
const (
	PathPod     = "pod"
	PathService = "service"
	PathGateway = "gateway"
	// PathAPI is a cluster of the environment that the check could not
	// reach at all (stopped, missing, API server down): a failed probe
	// from meshctl, so that a partial environment never passes.
	PathAPI = "api"
)

// FromMeshctl is the From of a PathAPI probe.
const FromMeshctl = "meshctl"

// Probe outcomes.
const (
	StatusOK         = "ok"
	StatusFailed     = "failed"
	StatusViaGateway = "via gateway"
)

// Checker runs connectivity checks.
type Checker struct {
	source    Source
	logger    log.Logger
	image     string
	namespace string
	timeout   time.Duration
	poll      time.Duration
	// attempts per probe, a second apart: routes and Services can take a
	// moment to be programmed after a cluster or the Service is created.
	attempts int
	meshed   bool
	reader   connReader
}

// Option configures a Checker.
type Option func(*Checker)

// WithLogger sets the logger.
func WithLogger(l log.Logger) Option { return func(c *Checker) { c.logger = l } }

// WithImage sets the image of the server and client pods.
func WithImage(image string) Option { return func(c *Checker) { c.image = image } }

// WithNamespace sets the namespace the check runs in (and deletes).
func WithNamespace(ns string) Option { return func(c *Checker) { c.namespace = ns } }

// WithTimeout bounds each wait: for a stale namespace to go, for pods to
// run, for the probes to finish.
func WithTimeout(d time.Duration) Option { return func(c *Checker) { c.timeout = d } }

// New returns a Checker that reads the environment from source.
func New(source Source, opts ...Option) *Checker {
	c := &Checker{source: source, logger: log.NoopLogger{}, image: DefaultImage, namespace: DefaultNamespace, timeout: DefaultTimeout, poll: time.Second, attempts: 10, reader: portForwardReader{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Result is what a check found.
type Result struct {
	Env string `json:"env"`
	// OK is true when no probe failed.
	OK bool `json:"ok"`
	// Meshed: the check ran in an ambient namespace and judged each
	// probe by the node proxies (WithMeshed).
	Meshed bool    `json:"meshed,omitempty"`
	Probes []Probe `json:"probes"`
}

// Probe is one path from a pod in one cluster to a server in another.
type Probe struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Path    string `json:"path"`              // pod, service or gateway (another network's server's Service, meshed)
	Address string `json:"address,omitempty"` // the IP connected to
	Status  string `json:"status"`            // ok, failed or via gateway (not tested)
	Error   string `json:"error,omitempty"`
	// Mesh is what the node proxies saw (meshed mode only).
	Mesh *Mesh `json:"mesh,omitempty"`
}

// untested is a gateway entry of the non-meshed check: listed, not probed.
func untested(p *Probe) bool { return p.Status == StatusViaGateway }

// Failed returns the probes that failed.
func (r *Result) Failed() []Probe {
	var out []Probe
	for _, p := range r.Probes {
		if p.Status == StatusFailed {
			out = append(out, p)
		}
	}
	return out
}

// run is one cluster during a check.
type run struct {
	plan   model.ClusterPlan
	kube   *kubeclient.Getter // client's and cfg's, for exec
	client kubernetes.Interface
	cfg    *rest.Config
	podIPs []string
	svcIPs []string
	// Meshed mode: this cluster's VIPs of every cluster's server Service,
	// by cluster, and the check's pods.
	svcByTo           map[string][]string
	server, clientPod endpoint
	// down is why the cluster cannot be reached; such a cluster gets a
	// failed PathAPI probe and takes no part in the rest.
	down string
}

// Check runs the check on env. Failed probes are in the Result, not the
// error: the error says the check itself could not run (a cluster
// unreachable, a pod that never started). The namespace is deleted in every
// cluster before returning, whatever happened.
func (c *Checker) Check(ctx context.Context, env string) (*Result, error) {
	all, err := c.resolve(ctx, env)
	if err != nil {
		return nil, err
	}
	var runs []*run
	var unreachable []Probe
	for _, r := range all {
		if r.down != "" {
			unreachable = append(unreachable, Probe{From: FromMeshctl, To: r.plan.Name, Path: PathAPI, Status: StatusFailed, Error: r.down})
			continue
		}
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return &Result{Env: env, Probes: unreachable}, nil
	}
	defer c.cleanup(runs)

	if err := parallel.ForEach(runs, func(r *run) error {
		if err := c.deleteNamespace(ctx, r.client); err != nil {
			return fmt.Errorf("cluster %q: removing a stale check: %w", r.plan.Name, err)
		}
		if err := c.startServer(ctx, r, runs); err != nil {
			return fmt.Errorf("cluster %q: %w", r.plan.Name, err)
		}
		if err := c.startClient(ctx, r); err != nil {
			return fmt.Errorf("cluster %q: %w", r.plan.Name, err)
		}
		if err := c.waitServer(ctx, r); err != nil {
			return fmt.Errorf("cluster %q: %w", r.plan.Name, err)
		}
		return nil
	}); err != nil {
		return nil, err
	}

	res := &Result{Env: env, OK: true, Meshed: c.meshed, Probes: []Probe{}}
	var mu sync.Mutex
	err = parallel.ForEach(runs, func(r *run) error {
		probes := c.plan(r, runs)
		if err := c.runClient(ctx, r, probes); err != nil {
			return fmt.Errorf("cluster %q: %w", r.plan.Name, err)
		}
		mu.Lock()
		res.Probes = append(res.Probes, probes...)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if c.meshed {
		if err := c.judgeAll(ctx, runs, res.Probes); err != nil {
			return nil, err
		}
	}
	res.Probes = append(res.Probes, unreachable...)
	sort.SliceStable(res.Probes, func(i, j int) bool {
		a, b := res.Probes[i], res.Probes[j]
		if a.From != b.From {
			return a.From < b.From
		}
		return a.To < b.To
	})
	for _, p := range res.Probes {
		if p.Status == StatusFailed {
			res.OK = false
		}
	}
	return res, nil
}

// plan lists the probes from r's client pod: every address of every server
// on its network, and for each cluster on another network an untested
// gateway entry or, meshed, a probe of r's own VIP of that cluster's
// server's Service (the node proxy takes it through the gateway).
func (c *Checker) plan(r *run, runs []*run) []Probe {
	var out []Probe
	for _, to := range runs {
		if to.plan.Network != r.plan.Network {
			if !c.meshed {
				out = append(out, Probe{From: r.plan.Name, To: to.plan.Name, Path: PathGateway, Status: StatusViaGateway})
				continue
			}
			for _, ip := range r.svcByTo[to.plan.Name] {
				out = append(out, Probe{From: r.plan.Name, To: to.plan.Name, Path: PathGateway, Address: ip})
			}
			continue
		}
		for _, ip := range to.podIPs {
			out = append(out, Probe{From: r.plan.Name, To: to.plan.Name, Path: PathPod, Address: ip})
		}
		svcIPs := to.svcIPs
		if c.meshed {
			svcIPs = r.svcByTo[to.plan.Name]
		}
		for _, ip := range svcIPs {
			out = append(out, Probe{From: r.plan.Name, To: to.plan.Name, Path: PathService, Address: ip})
		}
	}
	return out
}

// resolve reads every cluster's client before anything is created.
func (c *Checker) resolve(ctx context.Context, env string) ([]*run, error) {
	cs, err := c.source.Environment(ctx, env)
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("environment %q has no clusters (create it with `meshctl up`)", env)
	}
	runs := make([]*run, len(cs))
	for i, p := range cs {
		runs[i] = &run{plan: p.ClusterPlan}
	}
	err = parallel.ForEach(runs, func(r *run) error {
		kc, err := c.source.ClusterKubeconfig(ctx, r.plan, false)
		if err != nil {
			// A stopped or missing cluster: a failed probe, not the
			// end of the check.
			r.down = "reading its kubeconfig: " + err.Error()
			return nil
		}
		kg := kubeclient.FromBytes(kc, "", kubeclient.WithCommandRateLimit())
		cfg, err := kg.RESTConfig()
		if err != nil {
			return fmt.Errorf("cluster %q: kubeconfig: %w", r.plan.Name, err)
		}
		r.kube, r.cfg = kg, cfg
		if r.client, err = kg.Kubernetes(); err != nil {
			return fmt.Errorf("cluster %q: client: %w", r.plan.Name, err)
		}
		// Asked once with a short timeout, so that an API server that
		// does not answer is reported rather than waited on per step.
		dc, err := kubeclient.FromConfig(cfg, kubeclient.WithTimeout(apiProbeTimeout)).Discovery()
		if err != nil {
			return fmt.Errorf("cluster %q: client: %w", r.plan.Name, err)
		}
		if _, err := dc.ServerVersion(); err != nil {
			r.down = fmt.Sprintf("API server unreachable at %s: %v", cfg.Host, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return runs, nil
}

// cleanup deletes the check's pods and then its namespace everywhere, even
// when ctx has ended (an interrupted check must not leave pods behind). The
// pods go at once (grace period 0); the namespace controller takes 5–6 s
// more to finalize the namespace on kind, which the check does not wait
// for: that was half of a check's time. A check started meanwhile waits for
// it (deleteNamespace).
func (c *Checker) cleanup(runs []*run) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	_ = parallel.ForEach(runs, func(r *run) error {
		if r.client == nil {
			return nil
		}
		if err := c.deletePods(ctx, r.client); err != nil {
			c.logger.Warnf("cluster %q: %v", r.plan.Name, err)
		}
		if err := c.startDeletingNamespace(ctx, r.client); err != nil {
			c.logger.Warnf("cluster %q: %v", r.plan.Name, err)
		}
		return nil
	})
}

// oneLine flattens command output for a report.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// podProblem says why a pod is not running, from its status.
func podProblem(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return strings.TrimSpace(w.Reason + ": " + w.Message)
		}
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("exited %d (%s)", t.ExitCode, t.Reason)
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && cond.Message != "" {
			return cond.Reason + ": " + cond.Message
		}
	}
	return "phase " + string(p.Status.Phase)
}
