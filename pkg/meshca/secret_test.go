package meshca_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// TestIntegrationInstallSecret installs cacerts into a real kube-apiserver:
// created with its namespace, unchanged on a second install, updated after a
// rotation, and read back with exactly the files' bytes.
func TestIntegrationInstallSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	client := kubernetes.NewForConfigOrDie(testenv.New(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	dir := t.TempDir()
	install := func(opts ...meshca.Option) (meshca.Cacerts, string) {
		t.Helper()
		a := meshca.New(dir, opts...)
		if _, err := a.Ensure("cluster1"); err != nil {
			t.Fatal(err)
		}
		certs, err := a.Cacerts("cluster1")
		if err != nil {
			t.Fatal(err)
		}
		action, err := meshca.InstallSecret(ctx, client, certs)
		if err != nil {
			t.Fatal(err)
		}
		return certs, action
	}
	check := func(want meshca.Cacerts) *corev1.Secret {
		t.Helper()
		s, err := client.CoreV1().Secrets(meshca.Namespace).Get(ctx, meshca.SecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Type != corev1.SecretTypeOpaque || len(s.Data) != 4 {
			t.Errorf("secret type %s with %d keys, want Opaque with 4", s.Type, len(s.Data))
		}
		for k, v := range want {
			if !bytes.Equal(s.Data[k], v) {
				t.Errorf("secret key %s differs from the file", k)
			}
		}
		return s
	}

	certs, action := install()
	if action != meshca.SecretCreated {
		t.Errorf("first install: %s", action)
	}
	first := check(certs)
	if _, err := client.CoreV1().Namespaces().Get(ctx, meshca.Namespace, metav1.GetOptions{}); err != nil {
		t.Errorf("namespace: %v", err)
	}

	certs, action = install()
	if action != meshca.SecretUnchanged {
		t.Errorf("second install: %s", action)
	}
	if again := check(certs); again.ResourceVersion != first.ResourceVersion {
		t.Errorf("an unchanged install wrote the Secret: %s → %s", first.ResourceVersion, again.ResourceVersion)
	}

	rotated, action := install(meshca.WithRotate(true))
	if action != meshca.SecretUpdated {
		t.Errorf("install after rotation: %s", action)
	}
	if bytes.Equal(rotated[meshca.CACertFile], certs[meshca.CACertFile]) {
		t.Error("rotation did not change the files")
	}
	check(rotated)

	// A cacerts Secret of another type is someone else's: reported, kept.
	if err := client.CoreV1().Secrets(meshca.Namespace).Delete(ctx, meshca.SecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: meshca.SecretName, Namespace: meshca.Namespace}, Type: "example.com/other", Data: map[string][]byte{"x": []byte("y")}}
	if _, err := client.CoreV1().Secrets(meshca.Namespace).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := meshca.InstallSecret(ctx, client, rotated); err == nil || !strings.Contains(err.Error(), "exists with type example.com/other") {
		t.Errorf("a Secret of another type: %v", err)
	}
	if _, err := meshca.InstallSecret(ctx, client, meshca.Cacerts{meshca.CACertFile: []byte("x")}); err == nil || !strings.Contains(err.Error(), "ca-key.pem is empty") {
		t.Errorf("incomplete cacerts: %v", err)
	}
}
