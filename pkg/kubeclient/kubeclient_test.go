package kubeclient

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func kubeconfig(t *testing.T, servers map[string]string, current string) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	for name, server := range servers {
		kc.Clusters[name] = &clientcmdapi.Cluster{Server: server}
		kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "t"}
		kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	kc.CurrentContext = current
	b, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFileContextAndOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := kubeconfig(t, map[string]string{"a": "https://a.example:6443", "b": "https://b.example:6443"}, "a")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if h := FromFile(path, "").Host(); h != "https://a.example:6443" {
		t.Errorf("current context: host %q", h)
	}
	cfg, err := FromFile(path, "b", WithTimeout(7*time.Second), WithRateLimit(50, 100)).RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://b.example:6443" || cfg.Timeout != 7*time.Second || cfg.QPS != 50 || cfg.Burst != 100 {
		t.Errorf("context b with options: %s timeout %s qps %g burst %d", cfg.Host, cfg.Timeout, cfg.QPS, cfg.Burst)
	}
	if h := FromBytes(data, "b").Host(); h != "https://b.example:6443" {
		t.Errorf("bytes, context b: host %q", h)
	}
	if _, err := FromFile(path, "nope").Kubernetes(); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown context: %v", err)
	}
}

// The factory hands out one Getter (and so one set of clients) per
// kubeconfig content, and a new one once the file changes: a recreated
// cluster's kubeconfig never meets an old client.
func TestFactoryKeepsClientsPerContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	write := func(server string) {
		if err := os.WriteFile(path, kubeconfig(t, map[string]string{"c": server}, "c"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("https://one.example:6443")
	f := NewFactory(WithRateLimit(50, 100))
	g1 := f.File(path, "")
	cs1, err := g1.Kubernetes()
	if err != nil {
		t.Fatal(err)
	}
	if g := f.File(path, ""); g != g1 {
		t.Error("same file, new Getter")
	} else if cs, _ := g.Kubernetes(); cs != cs1 {
		t.Error("same Getter, new client")
	}
	if g := f.File(path, "", WithTimeout(time.Second)); g == g1 {
		t.Error("other options, same Getter")
	}
	write("https://two.example:6443")
	g2 := f.File(path, "")
	if g2 == g1 || g2.Host() != "https://two.example:6443" {
		t.Errorf("changed file: same Getter %t, host %q", g2 == g1, g2.Host())
	}
	if cfg, _ := g2.RESTConfig(); cfg.QPS != 50 {
		t.Errorf("factory options lost: qps %g", cfg.QPS)
	}
	missing := f.File(filepath.Join(t.TempDir(), "none"), "")
	if _, err := missing.RESTConfig(); err == nil {
		t.Error("missing kubeconfig: no error")
	}
	var nilFactory *Factory
	if h := nilFactory.File(path, "").Host(); h != "https://two.example:6443" {
		t.Errorf("nil factory: host %q", h)
	}
}

// Outside a pod, InCluster fails as rest.InClusterConfig does, from every
// accessor, and builds no client.
func TestInClusterOutsideAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	g := InCluster(WithTimeout(time.Second))
	if _, err := g.Kubernetes(); !errors.Is(err, rest.ErrNotInCluster) {
		t.Errorf("Kubernetes() error = %v, want rest.ErrNotInCluster", err)
	}
	if _, err := g.RESTConfig(); !errors.Is(err, rest.ErrNotInCluster) {
		t.Errorf("RESTConfig() error = %v, want rest.ErrNotInCluster", err)
	}
	if h := g.Host(); h != "" {
		t.Errorf("Host() = %q, want empty", h)
	}
}
