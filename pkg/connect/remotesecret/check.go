package remotesecret

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// States of a remote secret, as Check finds it.
const (
	// SecretCurrent: it names the API server Ensure would write now.
	SecretCurrent = "current"
	// SecretStale: it names another server (or none): the source's node
	// got a new address since Ensure wrote it by address, say.
	SecretStale = "stale"
	// SecretMissing: the holding cluster has no such Secret.
	SecretMissing = "missing"
)

// CheckResult is what Check found.
type CheckResult struct {
	Env     string        `json:"env"`
	Secrets []SecretCheck `json:"secrets"`
}

// SecretCheck is one remote secret Ensure would install, as installed.
type SecretCheck struct {
	// Cluster is the cluster the secret gives access to.
	Cluster string `json:"cluster"`
	// Target is the cluster that holds it.
	Target string `json:"target"`
	// Secret is namespace/name.
	Secret string `json:"secret"`
	// Server is the API server Ensure would write now; empty when the
	// source could not be resolved.
	Server string `json:"server,omitempty"`
	// Installed is the API server the installed secret names: empty when
	// it is missing or names none.
	Installed string `json:"installed,omitempty"`
	// State is one of the Secret* states; empty when the secret could not
	// be checked, and Error says why.
	State string `json:"state,omitempty"`
	Error string `json:"error,omitempty"`
}

// AnyInstalled says whether any of the environment's remote secrets is
// there at all: none is an environment whose remote secrets were never
// installed (`up --remote-secrets=false`), not one whose secrets are
// missing.
func (r *CheckResult) AnyInstalled() bool {
	for _, s := range r.Secrets {
		if s.State == SecretCurrent || s.State == SecretStale {
			return true
		}
	}
	return false
}

// Check compares every remote secret Ensure would install in env with what
// its holding cluster has: the same plan and the same choice of server as
// Ensure, read concurrently, nothing written (no reader account is made,
// no token read). A cluster that cannot be reached is reported on each of
// its secrets, not fatal: status, which runs this, is what a person runs
// when something is wrong. The secrets' tokens are parsed for the server
// only and never kept.
func (m *Manager) Check(ctx context.Context, env string) (*CheckResult, error) {
	cs, err := m.clusters(ctx, env)
	if err != nil {
		return nil, err
	}
	pairs := plan(cs)
	res := &CheckResult{Env: env, Secrets: make([]SecretCheck, len(pairs))}
	if len(pairs) == 0 {
		return res, nil
	}
	sources, targets := map[string]bool{}, map[string]bool{}
	for _, p := range pairs {
		sources[p.source], targets[p.target] = true, true
	}
	// Per-cluster failures are in eps, reported per secret below.
	eps, _ := m.resolve(ctx, cs, targets, sources)
	plans := byName(cs)
	_ = each(len(pairs), func(i int) error {
		p := pairs[i]
		sc := &res.Secrets[i]
		*sc = SecretCheck{Cluster: p.source, Target: p.target, Secret: Namespace + "/" + SecretPrefix + p.source}
		src, tgt := eps[p.source], eps[p.target]
		if src.err == nil {
			sc.Server = src.serverIn(plans[p.target])
		}
		switch {
		case tgt.err != nil:
			sc.Error = tgt.err.Error()
			return nil
		case src.err != nil:
			sc.Error = src.err.Error()
			return nil
		}
		installed, found, err := installedServer(ctx, tgt, p.source)
		switch {
		case err != nil:
			sc.Error = fmt.Sprintf("cluster %q: reading %s: %v", p.target, sc.Secret, err)
		case !found:
			sc.State = SecretMissing
		case installed == sc.Server:
			sc.Installed, sc.State = installed, SecretCurrent
		default:
			sc.Installed, sc.State = installed, SecretStale
		}
		return nil
	})
	return res, nil
}

// installedServer reads source's remote secret from target and returns the
// API server its kubeconfig names ("" when it holds none it can use).
func installedServer(ctx context.Context, target endpoint, source string) (server string, found bool, err error) {
	s, err := target.client.CoreV1().Secrets(Namespace).Get(ctx, SecretPrefix+source, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	// The parse error is dropped, not reported: it may quote the
	// kubeconfig, token included.
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[source])
	if err != nil {
		return "", true, nil
	}
	return cfg.Host, true, nil
}
