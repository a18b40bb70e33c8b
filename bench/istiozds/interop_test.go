package istiozds

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"istio.io/api/annotation"
	pconstants "istio.io/istio/cni/pkg/constants"
	"istio.io/istio/cni/pkg/nodeagent"
	"istio.io/istio/cni/pkg/util"
	istiolog "istio.io/istio/pkg/log"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshctl/meshctl/internal/testenv"
	"github.com/meshctl/meshctl/pkg/dataplane/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/proxy"
)

const (
	// childEnv marks the re-executed test process that runs in a network
	// namespace of its own.
	childEnv = "MESHCTL_ISTIOZDS_CHILD"
	nodeName = "node-1"
	meshNS   = "shop"
	webIP    = "10.244.1.5"
	badIP    = "10.244.1.6"
)

// noCerts: the test checks ZDS, not certificates; the proxy reports its
// workloads' certificates Unavailable and serves on.
type noCerts struct{}

func (noCerts) Fetch(context.Context, certs.Request) ([]byte, []byte, error) {
	return nil, nil, errors.New("no certificates in this test")
}

// inOwnNetns re-executes this test in a fresh network namespace and reports
// whether the caller is that child. Istio's agent programs the netns it
// runs in (host probe rules, an ipset) as the node's: it must never be the
// machine's.
func inOwnNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == "1" {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("lo up: %v: %s", err, out)
		}
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and Istio's in-pod rules")
	}
	if _, _, err := testenv.Binaries(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	// NODE_NAME is read when Istio's package initialises: set it for the child.
	cmd.Env = append(os.Environ(), childEnv+"=1", "NODE_NAME="+nodeName)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	t.Logf("child in its own netns:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if bytes.Contains(out, []byte("--- SKIP")) {
		t.Skip("child skipped")
	}
	return false
}

// hostRoot stands in for the host filesystem Istio's DaemonSet mounts at
// /host: proc/1 is this process (its netns is the agent's "host" netns, so
// the procfs scan skips it and finds no pods), and var/run/netns holds the
// pods' netns, as the container runtime's are.
func hostRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"proc", "var/run/netns"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(fmt.Sprintf("/proc/%d", os.Getpid()), filepath.Join(root, "proc", "1")); err != nil {
		t.Fatal(err)
	}
	return root
}

// podNetns starts a process in a new network namespace with eth0 = ip/24, as
// a pod sandbox, links it under the host root's var/run/netns, and returns
// the path CNI passes as CNI_NETNS.
func podNetns(t *testing.T, root, name, ip string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", "ip link set lo up && ip link add eth0 type veth peer name peer0 && ip link set peer0 up && ip addr add "+ip+"/24 dev eth0 && ip link set eth0 up && echo ready && exec sleep 600")
	// No Pdeathsig: it fires when the creating OS thread exits, and Istio's
	// agent ends threads it moved into other network namespaces. Cleanup
	// kills the process; the sleep bounds it otherwise.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("pod netns setup: %q, %v", line, err)
	}
	path := "/var/run/netns/" + name
	if err := os.Symlink(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid), filepath.Join(root, path)); err != nil {
		t.Fatal(err)
	}
	return path
}

// apiserver starts etcd and kube-apiserver from an OS thread kept for the
// test's duration: testenv's processes die with the thread that started
// them (Pdeathsig), and Istio's agent ends threads it moved into pod
// network namespaces, which may be any thread a test goroutine ran on.
func apiserver(t *testing.T) *rest.Config {
	t.Helper()
	type result struct {
		env *testenv.Env
		err error
	}
	started, stop, stopped := make(chan result, 1), make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		defer close(stopped)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		env, err := testenv.Start(ctx)
		cancel()
		started <- result{env, err}
		if err != nil {
			return
		}
		<-stop
		_ = env.Stop()
	}()
	r := <-started
	if r.err != nil {
		t.Fatalf("testenv: %v", r.err)
	}
	t.Cleanup(func() { close(stop); <-stopped })
	t.Logf("testenv: etcd + kube-apiserver ready in %s", r.env.StartTime.Round(time.Millisecond))
	return r.env.Config
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// istioLog sends Istio's logs to a file, the agent's scope at debug: the
// agent's side of every exchange (hello received, ack errors, snapshot
// sent) is read from there.
func istioLog(t *testing.T) func() string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "istio.log")
	o := istiolog.DefaultOptions()
	o.OutputPaths = []string{path}
	o.ErrorOutputPaths = []string{path}
	if err := istiolog.Configure(o); err != nil {
		t.Fatal(err)
	}
	if s := istiolog.FindScope(pconstants.CNIAgentLogScope); s != nil {
		s.SetOutputLevel(istiolog.DebugLevel)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(path)
			t.Logf("Istio's log:\n%s", b)
		}
	})
	return func() string { b, _ := os.ReadFile(path); return string(b) }
}

// agent is one run of Istio's istio-cni node agent.
type agent struct {
	srv    *nodeagent.Server
	cancel context.CancelFunc
}

// startAgent runs Istio's node agent as istio-cni's main does, with the ZDS
// socket at zdsSock and the CNI plugin's socket at pluginSock, and the
// chart's default enablement selectors.
func startAgent(t *testing.T, kubeconfig, zdsSock, pluginSock string) *agent {
	t.Helper()
	sel, err := util.NewCompiledEnablementSelectors([]util.EnablementSelector{
		{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"istio.io/dataplane-mode": "ambient"}}},
		{
			PodSelector:       metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "istio.io/dataplane-mode", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"none"}}}},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"istio.io/dataplane-mode": "ambient"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ready atomic.Value
	srv, err := nodeagent.NewServer(ctx, &ready, pluginSock, nodeagent.AmbientArgs{
		SystemNamespace: "istio-system", KubeConfig: kubeconfig, ServerSocket: zdsSock,
		EnablementSelector: sel, ExcludeNamespaces: []string{"kube-system"},
	})
	if err != nil {
		cancel()
		t.Fatalf("Istio's node agent: %v", err)
	}
	srv.Start()
	a := &agent{srv: srv, cancel: cancel}
	t.Cleanup(a.stop)
	return a
}

func (a *agent) stop() {
	a.cancel()
	a.srv.Stop(false)
}

// cniAdd posts a CNI ADD event to the agent as Istio's CNI plugin does, and
// returns the agent's HTTP status and body.
func cniAdd(t *testing.T, pluginSock, pod, netns, ip string) (int, string) {
	t.Helper()
	ev := nodeagent.CNIPluginAddEvent{Netns: netns, PodName: pod, PodNamespace: meshNS,
		IPs: []nodeagent.IPConfig{{Address: net.IPNet{IP: net.ParseIP(ip), Mask: net.CIDRMask(24, 32)}}}}
	body, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", pluginSock)
		},
	}}
	resp, err := c.Post("http://unix"+pconstants.CNIAddEventPath, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("CNI add %s: %v", pod, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func redirection(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	p, err := cs.CoreV1().Pods(meshNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Annotations[annotation.AmbientRedirection.Name]
}

func createPod(t *testing.T, cs kubernetes.Interface, name, sa string) types.UID {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods(meshNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: meshNS},
		Spec: corev1.PodSpec{NodeName: nodeName, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.UID
}

// TestInteropIstioCNIDrivesZDSClient: Istio's istio-cni node agent serves
// meshctl's proxy over ZDS. The proxy dials before the agent listens and
// connects when it does; a pod's CNI ADD reaches the proxy as AddWorkload
// with its netns and identity, and Istio marks the pod enrolled only on
// meshctl's ack; a refused pod is left pending with meshctl's reason; after
// the agent restarts, its snapshot keeps the pod (KeepWorkload) and the
// proxy keeps serving it; when the pod leaves the mesh, DelWorkload removes
// it and Istio unmarks it on the ack.
func TestInteropIstioCNIDrivesZDSClient(t *testing.T) {
	if !inOwnNetns(t) {
		return
	}
	// Istio's agent opens CNI netns paths and scans procfs under its host
	// mounts (/host in its DaemonSet).
	root := hostRoot(t)
	pconstants.HostMountsPath = root
	logs := istioLog(t)

	cfg := apiserver(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: meshNS, Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webUID := createPod(t, cs, "web", "web-sa")
	// No service account: meshctl cannot name its identity and refuses it.
	badUID := createPod(t, cs, "bad", "")
	webNetns, badNetns := podNetns(t, root, "web", webIP), podNetns(t, root, "bad", badIP)

	dir, err := os.MkdirTemp("", "izds") // short: sun_path is 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	zdsSock, pluginSock := filepath.Join(dir, "ztunnel.sock"), filepath.Join(dir, "pluginevent.sock")

	// meshctl's proxy, fed by nothing but ZDS, dialling before anyone listens.
	p, err := proxy.New(proxy.WithFetcher(noCerts{}), proxy.WithAddresses("", "", ""),
		proxy.WithWorkloadEvents(proxy.ZDS(zdsSock)))
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithCancel(ctx)
	pdone := make(chan error, 1)
	go func() { pdone <- p.Run(pctx) }()
	t.Cleanup(func() { pcancel(); <-pdone })
	time.Sleep(300 * time.Millisecond)

	kubeconfig := writeKubeconfig(t, cfg)
	a := startAgent(t, kubeconfig, zdsSock, pluginSock)
	eventually(t, "Istio's agent to send meshctl its (empty) snapshot", func() bool {
		l := logs()
		return strings.Contains(l, "received hello from ztunnel") && strings.Contains(l, "snapshot sent to ztunnel")
	})

	// AddWorkload: Istio enrols the pod only once meshctl acked it.
	if code, body := cniAdd(t, pluginSock, "web", webNetns, webIP); code != http.StatusOK {
		t.Fatalf("CNI add web: %d %s", code, body)
	}
	if got := redirection(t, cs, "web"); got != "enabled" {
		t.Errorf("web's %s = %q after meshctl's ack, want enabled", annotation.AmbientRedirection.Name, got)
	}
	w, ok := p.Dump().WorkloadState[string(webUID)]
	if !ok || w.Name != "web" || w.Namespace != meshNS || w.ServiceAccount != "web-sa" ||
		w.Identity != "spiffe://cluster.local/ns/shop/sa/web-sa" || len(w.Listeners) != 3 ||
		len(w.Addresses) != 1 || w.Addresses[0].String() != webIP {
		t.Fatalf("meshctl's workload for web: %+v (found %v)", w, ok)
	}

	// A refusing ack: Istio fails the CNI ADD with meshctl's reason and
	// leaves the pod pending, not enrolled.
	code, body := cniAdd(t, pluginSock, "bad", badNetns, badIP)
	if code != http.StatusInternalServerError || !strings.Contains(body, "service account are required") {
		t.Errorf("CNI add bad: %d %q, want 500 with meshctl's refusal", code, body)
	}
	if got := redirection(t, cs, "bad"); got != "pending" {
		t.Errorf("bad's %s = %q after meshctl's refusal, want pending", annotation.AmbientRedirection.Name, got)
	}
	if _, ok := p.Dump().WorkloadState[string(badUID)]; ok {
		t.Error("meshctl serves the pod it refused")
	}

	// istio-cni restarts. The proxy reconnects; the new agent cannot find
	// web's netns (no pod process in a kubelet cgroup), so its snapshot
	// says KeepWorkload, and meshctl keeps serving web.
	a.stop()
	mark := len(logs())
	startAgent(t, kubeconfig, zdsSock, pluginSock)
	eventually(t, "meshctl to reconnect to the restarted agent and ack its snapshot", func() bool {
		return strings.Contains(logs()[mark:], "snapshot sent to ztunnel")
	})
	l := logs()[mark:]
	if !strings.Contains(l, "sending 'keep' to ztunnel") || !strings.Contains(l, string(webUID)) {
		t.Error("the restarted agent sent no KeepWorkload for web")
	}
	if strings.Contains(l, "got ack error") {
		t.Error("Istio's agent logged an ack error from meshctl in the restarted agent's snapshot")
	}
	if _, ok := p.Dump().WorkloadState[string(webUID)]; !ok {
		t.Fatal("meshctl dropped web after the restarted agent's snapshot kept it")
	}

	// A second proxy connects (a rolling upgrade): it never had web, and
	// the agent's snapshot tells it to keep web. It acks, as ztunnel does.
	mark = len(logs())
	p2, err := proxy.New(proxy.WithFetcher(noCerts{}), proxy.WithAddresses("", "", ""),
		proxy.WithWorkloadEvents(proxy.ZDS(zdsSock)))
	if err != nil {
		t.Fatal(err)
	}
	p2ctx, p2cancel := context.WithCancel(ctx)
	p2done := make(chan error, 1)
	go func() { p2done <- p2.Run(p2ctx) }()
	t.Cleanup(func() { p2cancel(); <-p2done })
	eventually(t, "the second proxy to ack the agent's snapshot", func() bool {
		return strings.Contains(logs()[mark:], "snapshot sent to ztunnel")
	})
	if l := logs()[mark:]; !strings.Contains(l, "sending 'keep' to ztunnel") || strings.Contains(l, "got ack error") {
		t.Errorf("the second proxy's snapshot: want a keep for web and no ack error; Istio logged:\n%s", l)
	}
	if n := len(p2.Dump().WorkloadState); n != 0 {
		t.Errorf("the second proxy serves %d workloads after keeping one it never had", n)
	}

	// DelWorkload: web leaves the mesh; Istio sends it to both proxies and
	// removes its mark once they acked, and the first proxy stops serving it.
	pod, err := cs.CoreV1().Pods(meshNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels = map[string]string{"istio.io/dataplane-mode": "none"}
	if _, err := cs.CoreV1().Pods(meshNS).Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Istio to unmark web after meshctl acked DelWorkload", func() bool { return redirection(t, cs, "web") == "" })
	if _, ok := p.Dump().WorkloadState[string(webUID)]; ok {
		t.Error("meshctl still serves web after DelWorkload")
	}
}
