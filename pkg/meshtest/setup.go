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
	o := newOptions(opts)
	d, err := createAndRegisterTeardown(ctx, o)
	if err != nil {
		ginkgo.Fail(err.Error())
	}
	e, err := load(d, o.providerFor(d.Artifacts), o.log())
	if err != nil {
		ginkgo.Fail(err.Error())
	}
	return e
}

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
	o := newOptions(opts)
	first := func(ctx ginkgo.SpecContext) []byte {
		d, err := createAndRegisterTeardown(ctx, o)
		if err != nil {
			ginkgo.Fail(err.Error())
		}
		return d.marshal()
	}
	all := func(_ ginkgo.SpecContext, data []byte) {
		d, err := unmarshal(data)
		if err != nil {
			ginkgo.Fail(err.Error())
		}
		e, err := load(d, o.providerFor(d.Artifacts), o.log())
		if err != nil {
			ginkgo.Fail(err.Error())
		}
		*env = e
	}
	return first, all
}

// createAndRegisterTeardown makes the environment and, as soon as there is
// anything to delete, registers its deletion: a setup that fails halfway
// (connecting, say) leaves nothing behind either — after saving the clusters'
// state for whoever debugs it.
func createAndRegisterTeardown(ctx context.Context, o options) (description, error) {
	cfg, err := o.settings()
	if err != nil {
		return description{}, err
	}
	o.cfg, o.isolated = cfg, true
	if o.prov == nil {
		abs, err := filepath.Abs(cfg.Artifacts)
		if err != nil {
			return description{}, fmt.Errorf("meshtest: artifacts directory %q: %w", cfg.Artifacts, err)
		}
		o.prov = o.providerFor(abs)
	}
	d, err := create(ctx, o)
	if len(d.Clusters) > 0 {
		ginkgo.DeferCleanup(func(ctx ginkgo.SpecContext) error {
			return (&Env{desc: d, prov: o.prov, logger: o.log()}).teardown(ctx)
		})
	}
	if err != nil && len(d.Clusters) > 0 {
		if e, lerr := load(d, o.prov, o.log()); lerr == nil {
			dir := filepath.Join(d.Artifacts, d.Env, "setup-failure")
			if cerr := e.CollectArtifacts(ctx, dir); cerr != nil {
				o.log().Warnf("meshtest: collecting artifacts into %s: %v", dir, cerr)
			}
			err = fmt.Errorf("%w\n(artifacts in %s)", err, dir)
		}
	}
	return d, err
}

func (o options) log() log.Logger {
	if o.logger != nil {
		return o.logger
	}
	return cli.NewLogger(ginkgo.GinkgoWriter)
}

// providerFor is the provider of an environment whose artifacts are in dir.
func (o options) providerFor(dir string) provider {
	if o.prov != nil {
		return o.prov
	}
	return cluster.NewProvider(cluster.ProviderWithLogger(o.log()), cluster.ProviderWithArtifacts(dir))
}
