package remotesecret

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// TestBuild checks a remote secret has the shape istioctl gives it: one key
// named after the cluster, holding a kubeconfig whose cluster, user and
// context all carry that name, with the server, CA and token given.
func TestBuild(t *testing.T) {
	t.Parallel()
	s, err := Build("cluster1", "https://172.18.0.3:6443", []byte("CA PEM"), []byte("tok"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "istio-remote-secret-cluster1" || s.Namespace != "istio-system" || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("secret %s/%s of type %s", s.Namespace, s.Name, s.Type)
	}
	if len(s.Labels) != 1 || s.Labels["istio/multiCluster"] != "true" {
		t.Errorf("labels %v, want only istio/multiCluster=true", s.Labels)
	}
	if len(s.Annotations) != 1 || s.Annotations["networking.istio.io/cluster"] != "cluster1" {
		t.Errorf("annotations %v", s.Annotations)
	}
	if len(s.Data) != 1 || s.Data["cluster1"] == nil {
		t.Fatalf("data keys: want exactly cluster1, got %d keys", len(s.Data))
	}
	cfg, err := clientcmd.Load(s.Data["cluster1"])
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != "cluster1" || len(cfg.Contexts) != 1 || len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 {
		t.Fatalf("kubeconfig: current %q, %d contexts, %d clusters, %d users", cfg.CurrentContext, len(cfg.Contexts), len(cfg.Clusters), len(cfg.AuthInfos))
	}
	ctx := cfg.Contexts["cluster1"]
	cl, user := cfg.Clusters["cluster1"], cfg.AuthInfos["cluster1"]
	if ctx == nil || ctx.Cluster != "cluster1" || ctx.AuthInfo != "cluster1" || cl == nil || user == nil {
		t.Fatalf("kubeconfig names: %+v", cfg)
	}
	if cl.Server != "https://172.18.0.3:6443" || string(cl.CertificateAuthorityData) != "CA PEM" {
		t.Errorf("cluster: server %q, CA %q", cl.Server, cl.CertificateAuthorityData)
	}
	if user.Token != "tok" || user.ClientCertificateData != nil || user.ClientKeyData != nil {
		t.Error("user: want the reader token and nothing else")
	}
	again, _ := Build("cluster1", "https://172.18.0.3:6443", []byte("CA PEM"), []byte("tok"))
	if !same(again, s) {
		t.Error("building twice gives different secrets: re-runs would rewrite them")
	}
}

func TestBuildRejectsIncompleteCredentials(t *testing.T) {
	t.Parallel()
	if _, err := Build("cluster1", "", []byte("CA"), []byte("tok")); err == nil {
		t.Error("a kubeconfig without a server was accepted")
	}
}

func TestSame(t *testing.T) {
	t.Parallel()
	want, _ := Build("c", "https://10.0.0.1:6443", []byte("CA"), []byte("t"))
	tests := []struct {
		name   string
		change func(s *corev1.Secret)
		same   bool
	}{
		{"identical", func(*corev1.Secret) {}, true},
		{"extra label kept", func(s *corev1.Secret) { s.Labels["team"] = "mesh" }, true},
		{"label missing", func(s *corev1.Secret) { delete(s.Labels, MultiClusterLabel) }, false},
		{"annotation differs", func(s *corev1.Secret) { s.Annotations[ClusterAnnotation] = "other" }, false},
		{"stale extra key", func(s *corev1.Secret) { s.Data["old"] = []byte("x") }, false},
		{"other token", func(s *corev1.Secret) { s.Data["c"] = []byte("x") }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cur, _ := Build("c", "https://10.0.0.1:6443", []byte("CA"), []byte("t"))
			tt.change(cur)
			if got := same(cur, want); got != tt.same {
				t.Errorf("same = %v, want %v", got, tt.same)
			}
		})
	}
}
