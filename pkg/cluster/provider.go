package cluster

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/pkg/cluster/internal/docker"
	"github.com/meshctl/meshctl/pkg/cluster/internal/kindprovider"
)

// Kind is the part of the kind library meshctl uses. internal/kindprovider adapts
// kind's cluster.Provider to it; unit tests use a fake.
type Kind interface {
	// Create creates a cluster and leaves it in place on failure: meshctl
	// collects its logs before deleting it.
	Create(name string, cfg *v1alpha4.Cluster, kubeconfigPath string, wait time.Duration) error
	Delete(name, kubeconfigPath string) error
	List() ([]string, error)
	ListNodes(name string) ([]nodes.Node, error)
	KubeConfig(name string, internal bool) (string, error)
	CollectLogs(name, dir string) error
}

// Docker runs docker CLI commands (the registry container, network
// inspection, engine checks). kind itself drives Docker the same way.
type Docker interface {
	// Run runs `docker args...` and returns its standard output; a failure
	// carries standard error.
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// NodeReader reads a cluster's Kubernetes nodes through its API server.
type NodeReader interface {
	Nodes(ctx context.Context, kubeconfig []byte) ([]NodeStatus, error)
}

// systemReader is a NodeReader that also tells which of a cluster's
// kube-system workloads are not ready (apiNodeReader.System); status
// checks them on kind clusters.
type systemReader interface {
	// System takes when each node's container last started (by node
	// name; unknown nodes are not checked for it).
	System(ctx context.Context, kubeconfig []byte, started map[string]time.Time) ([]string, error)
}

// Provider creates, inspects and deletes meshctl environments.
type Provider struct {
	kind      Kind
	docker    Docker
	nodes     NodeReader
	logger    log.Logger
	artifacts string
	now       func() time.Time
	// poll is how often waits look again.
	poll time.Duration
	// snap remembers, during one verb's run, what Docker said of the
	// kind clusters (see snapshot).
	snap *snapshot
	// noKindWarning: a run on existing clusters alone without Docker
	// lists clusters at every step; saying why once is enough.
	noKindWarning sync.Once
}

// ProviderOption configures a Provider.
type ProviderOption func(*Provider)

// ProviderWithLogger sets the logger for progress and the kind library.
func ProviderWithLogger(l log.Logger) ProviderOption { return func(p *Provider) { p.logger = l } }

// ProviderWithArtifacts sets the directory for kubeconfigs and logs
// (default ./_artifacts).
func ProviderWithArtifacts(dir string) ProviderOption {
	return func(p *Provider) { p.artifacts = dir }
}

// ProviderWithKind replaces the kind library (tests).
func ProviderWithKind(k Kind) ProviderOption { return func(p *Provider) { p.kind = k } }

// ProviderWithDocker replaces the docker CLI (tests).
func ProviderWithDocker(d Docker) ProviderOption { return func(p *Provider) { p.docker = d } }

// ProviderWithNodeReader replaces the Kubernetes API client (tests).
func ProviderWithNodeReader(r NodeReader) ProviderOption {
	return func(p *Provider) { p.nodes = r }
}

// DefaultArtifacts is where kubeconfigs and logs go unless told otherwise.
const DefaultArtifacts = "_artifacts"

// NewProvider returns a Provider backed by kind's Docker provider unless
// options replace its parts.
func NewProvider(opts ...ProviderOption) *Provider {
	p := &Provider{artifacts: DefaultArtifacts, now: time.Now, poll: 2 * time.Second}
	for _, o := range opts {
		o(p)
	}
	if p.logger == nil {
		p.logger = log.NoopLogger{}
	}
	if p.docker == nil {
		p.docker = docker.CLI{}
	}
	if p.kind == nil {
		p.kind = kindprovider.New(p.logger)
	}
	p.snap = &snapshot{}
	p.kind = snapshotKind{Kind: p.kind, s: p.snap}
	if p.nodes == nil {
		p.nodes = apiNodeReader{}
	}
	return p
}

// Artifacts is the artifacts directory.
func (p *Provider) Artifacts() string { return p.artifacts }

// clusterDir is where one cluster's kubeconfigs and logs live.
func (p *Provider) clusterDir(env, cluster string) string {
	return filepath.Join(p.artifacts, env, cluster)
}

// KubeconfigPath is the host kubeconfig's path for a cluster of an environment.
func (p *Provider) KubeconfigPath(env, cluster string, internal bool) string {
	name := "kubeconfig"
	if internal {
		name = "kubeconfig-internal"
	}
	return filepath.Join(p.clusterDir(env, cluster), name)
}
