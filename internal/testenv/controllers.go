package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControllerManager returns the kube-controller-manager path: TESTENV_KUBE_CONTROLLER_MANAGER
// if set, else the one beside kube-apiserver (`make e2e-env` builds both).
func ControllerManager() (string, error) {
	return besideAPIServer("TESTENV_KUBE_CONTROLLER_MANAGER", "kube-controller-manager")
}

// Kubectl returns the kubectl path: TESTENV_KUBECTL if set, else the one
// beside kube-apiserver (`make e2e-env` builds both).
func Kubectl() (string, error) { return besideAPIServer("TESTENV_KUBECTL", "kubectl") }

// besideAPIServer is the path in $envVar, else binary name beside
// kube-apiserver, if it is an executable.
func besideAPIServer(envVar, name string) (string, error) {
	path := os.Getenv(envVar)
	if path == "" {
		_, api, err := Binaries()
		if err != nil {
			return "", err
		}
		path = filepath.Join(filepath.Dir(api), name)
	}
	if st, err := os.Stat(path); err != nil || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w (no %s at %s)", ErrBinariesMissing, name, path)
	}
	return path, nil
}

// NewWithControllers is New plus a kube-controller-manager that runs only the named
// controllers, for tests that need some of the cluster's behaviour without a scheduler or
// kubelet: "serviceaccount-token-controller" fills long-lived service-account token
// Secrets, "namespace-controller" finishes namespace deletion. It skips the test when a
// binary is missing, as New does.
func NewWithControllers(t testing.TB, controllers ...string) *rest.Config {
	t.Helper()
	if _, err := ControllerManager(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env, err := Start(ctx)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if err := env.StartControllers(controllers...); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Logf("testenv: etcd + kube-apiserver ready in %s at %s, controllers %s", env.StartTime.Round(time.Millisecond), env.Config.Host, strings.Join(controllers, ","))
	return env.Config
}

// StartControllers starts kube-controller-manager against e with only the named
// controllers. It signs legacy tokens with the API server's service-account key and puts
// the testenv CA into them, as kubeadm configures a cluster's controller manager. Stop
// stops it first.
func (e *Env) StartControllers(controllers ...string) error {
	return e.StartControllersWith(nil, controllers...)
}

// StartControllersWith is StartControllers with more flags, which take the
// place of its own (the last of a flag given twice counts): e.g.
// --leader-elect=true for a test of leader election.
func (e *Env) StartControllersWith(args []string, controllers ...string) error {
	bin, err := ControllerManager()
	if err != nil {
		return err
	}
	if len(controllers) == 0 {
		return fmt.Errorf("testenv: no controllers named")
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	kc.AuthInfos["testenv"] = &clientcmdapi.AuthInfo{ClientCertificateData: e.Config.CertData, ClientKeyData: e.Config.KeyData}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "testenv"}
	kc.CurrentContext = "testenv"
	kcPath := filepath.Join(e.Dir, "pki", "controller-manager.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kcPath); err != nil {
		return fmt.Errorf("testenv: controller-manager kubeconfig: %w", err)
	}
	if err := os.Chmod(kcPath, 0o600); err != nil {
		return err
	}
	if err := e.start("kube-controller-manager", bin, append([]string{
		"--kubeconfig=" + kcPath,
		"--controllers=" + strings.Join(controllers, ","),
		"--service-account-private-key-file=" + filepath.Join(e.Dir, "pki", "sa.key"),
		"--root-ca-file=" + filepath.Join(e.Dir, "pki", "ca.crt"),
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--secure-port=0",
		"--v=0",
	}, args...)...); err != nil {
		return err
	}
	// It has no health endpoint without a serving port: give it a moment
	// to fail on bad flags, and say why if it does.
	ch := e.waits[len(e.waits)-1]
	select {
	case werr := <-ch:
		return fmt.Errorf("testenv: kube-controller-manager exited early (%v); log tail:\n%s", werr, tail(filepath.Join(e.Dir, "kube-controller-manager.log"), 20))
	case <-time.After(time.Second):
	}
	return nil
}
