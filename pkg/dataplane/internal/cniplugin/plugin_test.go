package cniplugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/enroll"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/netnstest"
)

// The test binary doubles as the plugin: run with this variable set it is
// exactly what the runtime (or cnitool) would exec.
const asPluginEnv = "MESHCTL_TEST_RUN_AS_CNI_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(asPluginEnv) == "1" {
		Main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type result struct {
	stdout, stderr string
	code           int
}

// cniError decodes the error JSON the spec requires on failure.
func (r result) cniError(t *testing.T) (code uint, msg string) {
	t.Helper()
	var e struct {
		Code    uint   `json:"code"`
		Msg     string `json:"msg"`
		Details string `json:"details"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
		t.Fatalf("stdout is not CNI error JSON: %v\n%s", err, r.stdout)
	}
	return e.Code, e.Msg + ": " + e.Details
}

// invoke runs the plugin as cnitool does: CNI_* environment, config on stdin.
func invoke(t *testing.T, command, netnsPath, cniArgs, stdin string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{
		asPluginEnv + "=1",
		"CNI_COMMAND=" + command,
		"CNI_CONTAINERID=0123456789abcdef",
		"CNI_NETNS=" + netnsPath,
		"CNI_IFNAME=eth0",
		"CNI_PATH=/opt/cni/bin",
		"CNI_ARGS=" + cniArgs,
	}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.stderr, "panic") {
		t.Fatalf("plugin panicked:\n%s", r.stderr)
	}
	return r
}

func podArgs(ns, name string) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=0123456789abcdef;K8S_POD_UID=uid-1", ns, name)
}

// prevResult is what kindnet's ptp would hand us, in the given version.
func prevResult(ver string) string {
	if strings.HasPrefix(ver, "0.") {
		return `{"cniVersion":"` + ver + `","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"version":"4","address":"10.244.1.5/24","gateway":"10.244.1.1","interface":0}]}`
	}
	return `{"cniVersion":"` + ver + `","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1","interface":0}]}`
}

func conf(ver, socket, kubeconfig string, prev bool) string {
	c := map[string]any{"cniVersion": ver, "name": "kindnet", "type": "meshctl-cni", "agent_socket": socket,
		"exclude_namespaces": []string{"kube-system", "istio-system"}}
	if kubeconfig != "" {
		c["kubernetes"] = map[string]any{"kubeconfig": kubeconfig}
	}
	if prev {
		var p map[string]any
		json.Unmarshal([]byte(prevResult(ver)), &p)
		c["prevResult"] = p
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// checkPassedThrough asserts ADD succeeded and printed the previous result
// in the config's version, with the pod's address intact.
func checkPassedThrough(t *testing.T, r result, ver string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("ADD failed (exit %d): %s %s", r.code, r.stdout, r.stderr)
	}
	var out struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("ADD output is not a result: %v\n%s", err, r.stdout)
	}
	if out.CNIVersion != ver || len(out.IPs) != 1 || out.IPs[0].Address != "10.244.1.5/24" {
		t.Fatalf("ADD output %+v, want prevResult in %s", out, ver)
	}
}

// fakeAgent serves the node agent's add endpoint on a unix socket.
type fakeAgent struct {
	socket string
	mu     sync.Mutex
	events []ambient.AddEvent
	status int
	delay  time.Duration
}

func startAgent(t *testing.T) *fakeAgent {
	t.Helper()
	dir, err := os.MkdirTemp("", "cniagent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	a := &fakeAgent{socket: filepath.Join(dir, "a.sock"), status: http.StatusOK}
	ln, err := net.Listen("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev ambient.AddEvent
		if r.URL.Path != ambient.AddPath || json.NewDecoder(r.Body).Decode(&ev) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.events = append(a.events, ev)
		status, delay := a.status, a.delay
		a.mu.Unlock()
		time.Sleep(delay)
		w.WriteHeader(status)
		fmt.Fprint(w, "redirection failed: netns gone")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return a
}

func (a *fakeAgent) got() []ambient.AddEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]ambient.AddEvent(nil), a.events...)
}

// fakeAPIServer answers the two GETs the plugin makes, from real objects.
func fakeAPIServer(t *testing.T, nsLabels map[string]string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/namespaces/{ns}/pods/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: r.PathValue("name"), Namespace: r.PathValue("ns"), UID: "uid-1"}})
	})
	mux.HandleFunc("/api/v1/namespaces/{ns}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: r.PathValue("ns"), Labels: nsLabels}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":%q}}],
"users":[{"name":"u","user":{"token":"t"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}`, srv.URL)
	if err := os.WriteFile(kc, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

func TestPluginVersion(t *testing.T) {
	t.Parallel()
	r := invoke(t, "VERSION", "", "", `{"cniVersion":"1.1.0"}`)
	if r.code != 0 {
		t.Fatalf("VERSION failed: %s", r.stdout)
	}
	var v struct{ SupportedVersions []string }
	json.Unmarshal([]byte(r.stdout), &v)
	for _, want := range SupportedVersions {
		if !strings.Contains(strings.Join(v.SupportedVersions, " "), want) {
			t.Errorf("VERSION lacks %s: %s", want, r.stdout)
		}
	}
}

func TestPluginBadInputGivesCNIErrors(t *testing.T) {
	t.Parallel()
	netns := placeholderNetns(t)
	missing := filepath.Join(t.TempDir(), "no-agent.sock")
	cases := []struct {
		name, args, stdin string
		want              uint
	}{
		{"stdin not JSON", podArgs("app", "web"), `{"cniVersion":"1.0.0",`, 6},
		{"agent_socket of the wrong type", podArgs("app", "web"), `{"cniVersion":"1.0.0","name":"n","type":"meshctl-cni","agent_socket":42}`, 6},
		{"prevResult garbage", podArgs("app", "web"), `{"cniVersion":"1.0.0","name":"n","type":"meshctl-cni","prevResult":{"ips":"nope"}}`, 6},
		{"CNI_ARGS unparsable", "K8S_POD_NAME", conf("1.0.0", missing, "", true), 4},
		{"unsupported version", podArgs("app", "web"), `{"cniVersion":"9.9.9","name":"n","type":"meshctl-cni"}`, 1},
	}
	for _, c := range cases {
		r := invoke(t, "ADD", netns, c.args, c.stdin)
		if r.code == 0 {
			t.Errorf("%s: ADD succeeded", c.name)
			continue
		}
		if code, msg := r.cniError(t); code != c.want {
			t.Errorf("%s: CNI error code %d (%s), want %d", c.name, code, msg, c.want)
		}
	}
	// DEL frees the sandbox whatever the config says.
	if r := invoke(t, "DEL", "", podArgs("app", "web"), `{"cniVersion":"1.0.0","name":"n","type":"meshctl-cni","agent_socket":42}`); r.code != 0 {
		t.Errorf("DEL with a bad config failed: %s", r.stdout)
	}
	if r := invoke(t, "CHECK", netns, podArgs("app", "web"), conf("1.0.0", missing, "", false)); r.code == 0 {
		t.Error("CHECK without prevResult succeeded")
	}
	if r := invoke(t, "CHECK", netns, podArgs("app", "web"), conf("1.0.0", missing, "", true)); r.code != 0 {
		t.Errorf("CHECK with prevResult failed: %s", r.stdout)
	}
}

// Pods the mesh never touches must start even with no agent at all.
func TestPluginPassesThroughWithoutAgent(t *testing.T) {
	t.Parallel()
	netns := placeholderNetns(t)
	noAgent := filepath.Join(t.TempDir(), "absent.sock")
	plainNS := fakeAPIServer(t, nil)
	optedOut := fakeAPIServer(t, map[string]string{enroll.DataplaneModeLabel: enroll.DataplaneModeNone})
	for _, ver := range SupportedVersions {
		checkPassedThrough(t, invoke(t, "ADD", netns, podArgs("kube-system", "coredns"), conf(ver, noAgent, "", true)), ver)
		checkPassedThrough(t, invoke(t, "ADD", netns, podArgs("istio-system", "ztunnel-x"), conf(ver, noAgent, "", true)), ver)
		checkPassedThrough(t, invoke(t, "ADD", netns, "", conf(ver, noAgent, "", true)), ver)
		checkPassedThrough(t, invoke(t, "ADD", netns, podArgs("app", "web"), conf(ver, noAgent, plainNS, true)), ver)
		checkPassedThrough(t, invoke(t, "ADD", netns, podArgs("app", "web"), conf(ver, noAgent, optedOut, true)), ver)
	}
	// First in a chain (no prevResult): an empty result of the right version.
	r := invoke(t, "ADD", netns, podArgs("kube-system", "x"), conf("0.3.1", noAgent, "", false))
	if r.code != 0 || !strings.Contains(r.stdout, `"cniVersion": "0.3.1"`) {
		t.Errorf("ADD without prevResult: exit %d, %s", r.code, r.stdout)
	}
}

// placeholderNetns stands in for CNI_NETNS where the plugin must not get as
// far as looking at it (pass-through and bad input), so those tests need no
// root. skel refuses the plugin's own netns, hence a plain file.
func placeholderNetns(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// netnsPath names a netns the test created in a way a child process can open.
func netnsPath(f *os.File) string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()) }

func TestIntegrationPluginAsksAgentInRealNetns(t *testing.T) {
	netnstest.Require(t)
	pod := netnstest.New(t)
	path := netnsPath(pod)
	agent := startAgent(t)
	meshedNS := fakeAPIServer(t, map[string]string{enroll.DataplaneModeLabel: enroll.DataplaneModeAmbient})

	for _, ver := range SupportedVersions {
		for _, kc := range []string{"", meshedNS} {
			before := len(agent.got())
			checkPassedThrough(t, invoke(t, "ADD", path, podArgs("app", "web"), conf(ver, agent.socket, kc, true)), ver)
			evs := agent.got()
			if len(evs) != before+1 {
				t.Fatalf("%s kubeconfig=%q: agent asked %d times, want once", ver, kc, len(evs)-before)
			}
			ev := evs[len(evs)-1]
			if ev.Netns != path || ev.PodName != "web" || ev.PodNamespace != "app" ||
				len(ev.IPs) != 1 || ev.IPs[0].Address.String() != "10.244.1.5/24" {
				t.Fatalf("%s: agent got %+v", ver, ev)
			}
		}
	}

	cases := []struct {
		name    string
		netns   string
		socket  string
		status  int
		delay   time.Duration
		want    uint
		wantMsg string
	}{
		{name: "agent refuses", netns: path, socket: agent.socket, status: http.StatusInternalServerError, want: 11, wantMsg: "netns gone"},
		{name: "agent not running", netns: path, socket: filepath.Join(t.TempDir(), "gone.sock"), status: http.StatusOK, want: 11, wantMsg: "asking node agent"},
		{name: "agent too slow", netns: path, socket: agent.socket, status: http.StatusOK, delay: 6 * time.Second, want: 11, wantMsg: "did not answer within 5s"},
		{name: "netns does not exist", netns: "/var/run/netns/meshctl-test-absent", socket: agent.socket, status: http.StatusOK, want: 8, wantMsg: "not found"},
	}
	for _, c := range cases {
		agent.mu.Lock()
		agent.status, agent.delay = c.status, c.delay
		agent.mu.Unlock()
		start := time.Now()
		r := invoke(t, "ADD", c.netns, podArgs("app", "web"), conf("1.1.0", c.socket, "", true))
		if r.code == 0 {
			t.Errorf("%s: ADD succeeded; the pod would start unmeshed", c.name)
			continue
		}
		code, msg := r.cniError(t)
		if code != c.want || !strings.Contains(msg, c.wantMsg) {
			t.Errorf("%s: error %d %q, want %d containing %q", c.name, code, msg, c.want, c.wantMsg)
		}
		if took := time.Since(start); took > 5500*time.Millisecond+time.Second {
			t.Errorf("%s: took %s, want the 5s bound", c.name, took)
		}
	}
}

// TestPluginDelSucceedsWhateverStdin: DEL must free the sandbox even when
// stdin is not JSON, is empty, or names a version the plugin does not
// speak (skel itself refuses those before the plugin's Del runs).
func TestPluginDelSucceedsWhateverStdin(t *testing.T) {
	t.Parallel()
	for _, stdin := range []string{`{"cniVersion":"1.0.0",`, "", "garbage", `{"cniVersion":"9.9.9","name":"n","type":"meshctl-cni"}`} {
		if r := invoke(t, "DEL", "", podArgs("app", "web"), stdin); r.code != 0 || r.stdout != "" {
			t.Errorf("DEL with stdin %q: exit %d, stdout %q", stdin, r.code, r.stdout)
		}
	}
}

// TestPluginAsksAgentWhenAPIServerIsDown: the plugin's kubeconfig points
// at an API server that refuses connections. The agent (deciding from its
// informer cache) answers, and its answer is the plugin's: a pod it calls
// unmeshed starts; a pod it cannot place does not.
func TestPluginAsksAgentWhenAPIServerIsDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"http://%s"}}],
"users":[{"name":"u","user":{"token":"t"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}`, dead)
	if err := os.WriteFile(kc, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	netns := placeholderNetns(t)
	agent := startAgent(t)
	r := invoke(t, "ADD", netns, podArgs("app", "web"), conf("1.0.0", agent.socket, kc, true))
	checkPassedThrough(t, r, "1.0.0")
	agent.mu.Lock()
	n := len(agent.events)
	agent.status = http.StatusInternalServerError
	agent.mu.Unlock()
	if n != 1 {
		t.Errorf("agent asked %d times, want 1", n)
	}
	if r := invoke(t, "ADD", netns, podArgs("app", "web"), conf("1.0.0", agent.socket, kc, true)); r.code == 0 {
		t.Error("ADD succeeded although neither the API server nor the agent could place the pod")
	}
}
