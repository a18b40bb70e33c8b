package meshtest

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/onsi/ginkgo/v2"
	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/pkg/cluster"
)

// Setup makes the suite's environment — creating it through the library
// behind `meshctl up`, or reusing the one `meshctl up` made (-meshtest.reuse)
// — and registers its teardown with DeferCleanup. Call it in a BeforeSuite,
// or in an Ordered container's BeforeAll. Anything wrong (a topology that
// cannot be satisfied, an environment to reuse that does not match) fails
// right there with one message.
//
// With parallel Ginkgo processes, use SynchronizedSetup instead: it makes the
// environment once.
func Setup(ctx context.Context, opts ...Option) *Env {
	ginkgo.GinkgoHelper()
	e, err := New(ctx, opts...)
	if err != nil {
		ginkgo.Fail(err.Error())
	}
	ginkgo.DeferCleanup(e.Close)
	return e
}

// New makes the environment as Setup does, without Ginkgo: for a TestMain,
// or to check an error. Close deletes what it created. When setting up fails
// after clusters were created, their state is saved under
// <artifacts>/<env>/setup-failure and they are deleted (unless kept) before
// New returns the error.
func New(ctx context.Context, opts ...Option) (*Env, error) {
	o, err := newOptions(opts).resolved()
	if err != nil {
		return nil, err
	}
	d, err := create(ctx, o)
	if err != nil {
		if len(d.Clusters) > 0 {
			err = abandon(ctx, o, d, err)
		}
		return nil, err
	}
	return load(d, o.prov, o.log(), o.mesh...)
}

// Close deletes the environment if this run created it and was not told to
// keep it, as `meshctl down` does (mesh.Down): kind clusters are deleted,
// and existing clusters lose meshctl's Helm releases and labelled objects but
// are never deleted. A reused environment is left alone.
func (e *Env) Close(ctx context.Context) error { return e.teardown(ctx) }

// SynchronizedSetup returns the two functions of a SynchronizedBeforeSuite
// that makes the environment once, on process 1, and gives every parallel
// process its own clients for it:
//
//	var env *meshtest.Env
//	var _ = SynchronizedBeforeSuite(meshtest.SynchronizedSetup(&env, meshtest.WithClusters(2)))
//
// Process 1 passes the others a small description (names, networks, roles,
// kubeconfig paths; no keys). The teardown runs on process 1 after every
// process has finished, as a SynchronizedAfterSuite would.
func SynchronizedSetup(env **Env, opts ...Option) (func(ginkgo.SpecContext) []byte, func(ginkgo.SpecContext, []byte)) {
	first := func(ctx ginkgo.SpecContext) []byte {
		e, err := New(ctx, opts...)
		if err != nil {
			ginkgo.Fail(err.Error())
		}
		ginkgo.DeferCleanup(e.Close)
		return e.desc.marshal()
	}
	all := func(_ ginkgo.SpecContext, data []byte) {
		d, err := unmarshal(data)
		if err != nil {
			ginkgo.Fail(err.Error())
		}
		o, err := newOptions(opts).resolved()
		if err != nil {
			ginkgo.Fail(err.Error())
		}
		e, err := load(d, o.prov, o.log())
		if err != nil {
			ginkgo.Fail(err.Error())
		}
		*env = e
	}
	return first, all
}

// resolved settles the settings and the provider, once.
func (o options) resolved() (options, error) {
	cfg, err := o.settings()
	if err != nil {
		return o, err
	}
	abs, err := filepath.Abs(cfg.Artifacts)
	if err != nil {
		return o, fmt.Errorf("meshtest: artifacts directory %q: %w", cfg.Artifacts, err)
	}
	cfg.Artifacts = abs
	o.cfg, o.isolated = cfg, true
	if o.prov == nil {
		o.prov = cluster.NewProvider(cluster.ProviderWithLogger(o.log()), cluster.ProviderWithArtifacts(abs))
	}
	return o, nil
}

// abandon handles a setup that failed halfway (connecting, say): it saves the
// clusters' state for whoever debugs it, then deletes what this run created
// unless told to keep it, and says where the artifacts are.
func abandon(ctx context.Context, o options, d description, cause error) error {
	e, err := load(d, o.prov, o.log(), o.mesh...)
	if err != nil {
		e = &Env{desc: d, prov: o.prov, logger: o.log(), meshOpts: o.mesh}
	} else {
		dir := filepath.Join(d.Artifacts, d.Env, "setup-failure")
		if err := e.CollectArtifacts(ctx, dir); err != nil {
			o.log().Warnf("%v", err)
		}
		cause = fmt.Errorf("%w\n(artifacts in %s)", cause, dir)
	}
	if err := e.teardown(ctx); err != nil {
		cause = fmt.Errorf("%w\n%v", cause, err)
	}
	return cause
}

func (o options) log() log.Logger {
	if o.logger != nil {
		return o.logger
	}
	return cli.NewLogger(ginkgo.GinkgoWriter)
}
