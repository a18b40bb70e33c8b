package mesh

import (
	"context"
	"fmt"

	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/connect/remotesecret"
)

// readRememberer is a Provider that can read each fact about the kind
// clusters once for a run that takes no lock (*cluster.Provider is one);
// another reads them every time it is asked.
type readRememberer interface {
	RememberReads() (release func())
}

// status reads env: every cluster's health from the provider, then (unless
// WithRemoteSecrets(false)) the remote secrets the clusters hold. The
// provider remembers what it read of the clusters meanwhile, so the check
// of the secrets reads again only what it alone needs: each source's
// address and the secrets themselves.
func (m *Config) status(ctx context.Context, env, registry string) (*cluster.StatusResult, error) {
	if r, ok := m.p.(readRememberer); ok {
		defer r.RememberReads()()
	}
	res, err := m.p.Status(ctx, env, registry)
	if err != nil || !m.o.remoteSecrets || len(res.Clusters) == 0 {
		return res, err
	}
	cs := make([]model.ClusterState, len(res.Clusters))
	for i, c := range res.Clusters {
		cs[i] = c.ClusterState
	}
	chk, err := m.remoteSecrets(statusSource{Provider: m.p, clusters: cs}).Check(ctx, env)
	if err != nil {
		// Not reached with the clusters status found (Check fails only on
		// none); status reports, it does not fail.
		m.o.logger.Warnf("remote secrets not checked: %v", err)
		return res, nil
	}
	addRemoteSecretProblems(res, chk)
	return res, nil
}

// statusSource is the provider with the environment's clusters as status
// found them: the check plans the secrets of the same clusters the report
// shows, and lists nothing again.
type statusSource struct {
	Provider
	clusters []model.ClusterState
}

func (s statusSource) Environment(context.Context, string) ([]model.ClusterState, error) {
	return s.clusters, nil
}

// addRemoteSecretProblems reports, on the cluster that holds it, every
// remote secret that is missing or names an API server other than the one
// `up` would write now: istiod there cannot read that cluster. An
// environment that holds none of its remote secrets never had them
// installed (`up --remote-secrets=false`) and has nothing to report. A
// secret of a cluster status already finds unhealthy is not reported: its
// problem is said, and `up` rewrites the secrets after healing it.
func addRemoteSecretProblems(res *cluster.StatusResult, chk *remotesecret.CheckResult) {
	if !chk.AnyInstalled() {
		return
	}
	healthy := map[string]bool{}
	for _, c := range res.Clusters {
		healthy[c.Name] = c.Error == ""
	}
	problems := map[string][]string{}
	var holders []string
	for _, s := range chk.Secrets {
		if !healthy[s.Target] || !healthy[s.Cluster] {
			continue
		}
		var p string
		switch {
		case s.Error != "":
			p = fmt.Sprintf("checking remote secret %s: %s", s.Secret, s.Error)
		case s.State == remotesecret.SecretMissing:
			p = fmt.Sprintf("remote secret %s is missing: istiod here cannot read cluster %s (API server %s); `meshctl up` (or `meshctl connect`) writes it again", s.Secret, s.Cluster, s.Server)
		case s.State == remotesecret.SecretStale && s.Installed == "":
			p = fmt.Sprintf("remote secret %s is stale: it holds no kubeconfig for cluster %s (API server now %s); `meshctl up` (or `meshctl connect`) rewrites it", s.Secret, s.Cluster, s.Server)
		case s.State == remotesecret.SecretStale:
			p = fmt.Sprintf("remote secret %s is stale: it names cluster %s's API server %s, now %s; `meshctl up` (or `meshctl connect`) rewrites it", s.Secret, s.Cluster, s.Installed, s.Server)
		default:
			continue
		}
		if problems[s.Target] == nil {
			holders = append(holders, s.Target)
		}
		problems[s.Target] = append(problems[s.Target], p)
	}
	for _, h := range holders {
		res.AddProblems(h, cluster.StateRemoteSecretsStale, problems[h]...)
	}
}
