package cluster

import (
	"fmt"
	"net"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/pkg/cluster/internal/existing"
	"github.com/meshctl/meshctl/pkg/cluster/internal/kindprovider"
	"github.com/meshctl/meshctl/pkg/cluster/internal/records"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// kubeconfig returns a cluster's kubeconfig with its cluster, user and
// context all named after the mesh cluster (kind says "kind-<name>"). The
// internal one points at the control-plane container's IP on the kind
// network, which works from the host and from other containers alike — how
// Istio's scripts let one cluster's control plane reach another's.
//
// An existing cluster's is the selected context of the user's kubeconfig,
// flattened and renamed the same way; internal or not, its server is the
// one the user gave (meshctl cannot know of another address).
func (p *Provider) kubeconfig(c model.ClusterPlan, internal bool) ([]byte, error) {
	if c.Existing {
		cfg, err := existing.Kubeconfig(c)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
		}
		data, err := clientcmd.Write(*cfg)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: writing kubeconfig: %w", c.Name, err)
		}
		return data, nil
	}
	raw, err := p.kind.KubeConfig(c.KindName, false)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: reading kubeconfig: %w", c.Name, err)
	}
	return p.renameKubeconfig(c, []byte(raw), internal)
}

// renameKubeconfig rewrites kind's kubeconfig for the mesh cluster.
func (p *Provider) renameKubeconfig(c model.ClusterPlan, raw []byte, internal bool) ([]byte, error) {
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: parsing kind's kubeconfig: %w", c.Name, err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("cluster %q: kind's kubeconfig has no current context", c.Name)
	}
	cl, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cl == nil || user == nil {
		return nil, fmt.Errorf("cluster %q: kind's kubeconfig context %q is incomplete", c.Name, cfg.CurrentContext)
	}
	if internal {
		server, err := p.internalServer(c)
		if err != nil {
			return nil, err
		}
		cl.Server = server
	}
	out := clientcmdapi.NewConfig()
	out.Clusters[c.Name] = cl
	out.AuthInfos[c.Name] = user
	out.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: c.Name}
	out.CurrentContext = c.Name
	data, err := clientcmd.Write(*out)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: writing kubeconfig: %w", c.Name, err)
	}
	return data, nil
}

// internalServer is the API server's address on the kind network.
func (p *Provider) internalServer(c model.ClusterPlan) (string, error) {
	ns, err := p.kind.ListNodes(c.KindName)
	if err != nil {
		return "", fmt.Errorf("cluster %q: listing nodes: %w", c.Name, err)
	}
	cp, err := kindprovider.ControlPlane(ns)
	if err != nil {
		return "", fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	v4, v6, err := cp.IP()
	if err != nil {
		return "", fmt.Errorf("cluster %q: address of %s: %w", c.Name, cp, err)
	}
	ip := v4
	if c.IPFamily == model.IPv6 || ip == "" {
		ip = v6
	}
	if ip == "" {
		return "", fmt.Errorf("cluster %q: %s has no address on the kind network", c.Name, cp)
	}
	return "https://" + net.JoinHostPort(ip, "6443"), nil
}

// exportKubeconfigs writes both kubeconfigs of a cluster, owner-only: they
// hold the cluster-admin client key.
//
// An existing cluster gets copies too, rather than meshctl pointing at the
// user's file: every later step (cacerts, Helm, remote secrets, test
// suites) then finds every cluster's kubeconfig at the same place with the
// mesh name as its current context, and a later change of the user's
// current-context cannot redirect them to another cluster. The copy holds
// the user's credentials, hence 0600, and down removes it; up refreshes it.
func (p *Provider) exportKubeconfigs(plan *model.Plan, c model.ClusterPlan) error {
	if c.Existing {
		data, err := p.kubeconfig(c, false)
		if err != nil {
			return err
		}
		for _, internal := range []bool{false, true} {
			if err := records.WritePrivate(p.KubeconfigPath(plan.Env, c.Name, internal), data); err != nil {
				return fmt.Errorf("cluster %q: %w", c.Name, err)
			}
		}
		return nil
	}
	// One read from the node serves both files: each read is a docker exec.
	raw, err := p.kind.KubeConfig(c.KindName, false)
	if err != nil {
		return fmt.Errorf("cluster %q: reading kubeconfig: %w", c.Name, err)
	}
	for _, internal := range []bool{false, true} {
		data, err := p.renameKubeconfig(c, []byte(raw), internal)
		if err != nil {
			return err
		}
		if err := records.WritePrivate(p.KubeconfigPath(plan.Env, c.Name, internal), data); err != nil {
			return fmt.Errorf("cluster %q: %w", c.Name, err)
		}
	}
	return nil
}
