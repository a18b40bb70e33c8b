package testenv

import (
	"fmt"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig is a kubeconfig for the API server cfg points at (New's), its
// cluster, user and current context all called name: what meshctl reads
// from kind, or from a user's file, for a cluster.
func Kubeconfig(t testing.TB, name string, cfg *rest.Config) []byte {
	t.Helper()
	c := clientcmdapi.NewConfig()
	c.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	c.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	c.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	c.CurrentContext = name
	out, err := clientcmd.Write(*c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WithServer is kubeconfig kc with the server of its cluster entry named
// cluster replaced: a test's stand-in for a cluster whose API server
// moved (a node's new address).
func WithServer(kc []byte, cluster, server string) ([]byte, error) {
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		return nil, err
	}
	c, ok := cfg.Clusters[cluster]
	if !ok {
		return nil, fmt.Errorf("kubeconfig has no cluster %q", cluster)
	}
	c.Server = server
	return clientcmd.Write(*cfg)
}
