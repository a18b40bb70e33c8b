package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/enroll"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/testutil"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/zds"
)

const node = "node-1"

// recordingRules stands in for nftables where the test cannot be root; it
// records which netns paths got rules, so tests can assert on them.
type recordingRules struct {
	mu      sync.Mutex
	applied []string
	removed []string
}

func (r *recordingRules) Apply(ns *os.File) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, ns.Name())
	return nil
}

func (r *recordingRules) Remove(ns *os.File) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, ns.Name())
	return nil
}

func (r *recordingRules) counts() (applied, removed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.applied), len(r.removed)
}

// recordingSNAT stands in for the node-side probe SNAT; it keeps the set.
type recordingSNAT struct {
	mu     sync.Mutex
	set    map[netip.Addr]bool
	setups int
}

func (r *recordingSNAT) Setup(pods ...netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setups++
	r.set = map[netip.Addr]bool{}
	for _, ip := range pods {
		r.set[ip] = true
	}
	return nil
}

func (r *recordingSNAT) AddPod(ips ...netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ip := range ips {
		r.set[ip] = true
	}
	return nil
}

func (r *recordingSNAT) RemovePod(ips ...netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ip := range ips {
		delete(r.set, ip)
	}
	return nil
}

func (r *recordingSNAT) setupCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.setups
}

func (r *recordingSNAT) has(ip string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.set[netip.MustParseAddr(ip)]
}

func namespace(name string, meshed bool) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if meshed {
		ns.Labels[enroll.DataplaneModeLabel] = enroll.DataplaneModeAmbient
	}
	return ns
}

func pod(ns, name, nodeName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: nodeName, ServiceAccountName: name + "-sa"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

type harness struct {
	t                   *testing.T
	client              *fake.Clientset
	rules               *recordingRules
	probes              *recordingSNAT
	dir                 string
	pluginSock, zdsSock string
	reg                 *prometheus.Registry
}

func newHarness(t *testing.T, objs ...any) *harness {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent") // short: sun_path is 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var ros []runtime.Object
	for _, o := range objs {
		ros = append(ros, o.(runtime.Object))
	}
	return &harness{
		t: t, client: fake.NewClientset(ros...), rules: &recordingRules{}, probes: &recordingSNAT{}, dir: dir,
		pluginSock: filepath.Join(dir, "plugin.sock"), zdsSock: filepath.Join(dir, "zds.sock"),
	}
}

// start runs an agent until the returned stop is called (or the test ends).
func (h *harness) start(opts ...Option) (stop func()) {
	h.t.Helper()
	h.reg = prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	a := New(append([]Option{
		WithClient(h.client), WithNodeName(node), WithRedirector(h.rules), WithProbeSNAT(h.probes),
		WithPluginSocket(h.pluginSock), WithZDSSocket(h.zdsSock), WithStateDir(filepath.Join(h.dir, "state")),
		WithRegisterer(h.reg), WithZDSTimeout(time.Second), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}, opts...)...)
	done := make(chan error, 1)
	os.Remove(h.pluginSock)
	go func() { done <- a.Run(ctx) }()
	testutil.Eventually(h.t, "agent listening", func() bool { _, err := os.Stat(h.pluginSock); return err == nil })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("agent Run: %v", err)
			}
		})
	}
	h.t.Cleanup(stop)
	return stop
}

// post sends the plugin's add request, as the CNI plugin does.
func (h *harness) post(body any) (int, string) {
	h.t.Helper()
	raw, ok := body.([]byte)
	if !ok {
		raw, _ = json.Marshal(body)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.pluginSock)
	}}, Timeout: 10 * time.Second}
	resp, err := c.Post("http://unix"+ambient.AddPath, "application/json", bytes.NewReader(raw))
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(msg)
}

// proxy connects as ztunnel would and acks everything.
type proxy struct {
	c      *zds.Client
	events chan zds.Event
}

func (h *harness) proxy() *proxy {
	h.t.Helper()
	var c *zds.Client
	testutil.Eventually(h.t, "zds socket accepting", func() bool {
		var err error
		c, err = zds.Dial(context.Background(), h.zdsSock)
		return err == nil
	})
	p := &proxy{c: c, events: make(chan zds.Event, 32)}
	go func() {
		defer close(p.events)
		for {
			ev, err := c.Recv(context.Background())
			if err != nil {
				return
			}
			if ev.Netns != nil {
				ev.Netns.Close()
			}
			if c.Ack(nil) != nil {
				return
			}
			p.events <- ev
		}
	}()
	h.t.Cleanup(func() { c.Close() })
	return p
}

func (p *proxy) next(t *testing.T) zds.Event {
	t.Helper()
	select {
	case ev, ok := <-p.events:
		if !ok {
			t.Fatal("proxy connection closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("proxy got nothing within 5s")
	}
	return zds.Event{}
}

func (p *proxy) quiet(t *testing.T) {
	t.Helper()
	select {
	case ev := <-p.events:
		t.Fatalf("proxy got unexpected %s %s", ev.Kind, ev.UID)
	case <-time.After(200 * time.Millisecond):
	}
}

// addEvent is the plugin's request; the pod's IP is 10.244.0.<len(name)>.
func addEvent(ns, name, netns string) ambient.AddEvent {
	ip := net.IPv4(10, 244, 0, byte(len(name)))
	return ambient.AddEvent{Netns: netns, PodName: name, PodNamespace: ns,
		IPs: []ambient.IPConfig{{Address: net.IPNet{IP: ip, Mask: net.CIDRMask(24, 32)}}}}
}

const ownNetns = "/proc/self/ns/net" // a real netns any user can open

func TestAgentMeshesEnrolledPodsAndFollowsInformer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, namespace("app", true), namespace("plain", false),
		pod("app", "web", node), pod("app", "api", node), pod("plain", "db", node), pod("app", "far", "node-2"))
	// Only this test serves metrics, so parallel tests never race for a port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	h.start(WithMetricsAddr(metricsAddr))
	p := h.proxy()
	if ev := p.next(t); ev.Kind != zds.KindSnapshotSent {
		t.Fatalf("first event %v, want SnapshotSent", ev.Kind)
	}
	testutil.Eventually(t, "gauge", func() bool { return testutil.Gauge(t, h.reg, "ztunnel_connected") == 1 })
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "ztunnel_connected 1") {
		t.Fatalf("/metrics lacks ztunnel_connected 1:\n%s", body)
	}

	if code, msg := h.post(addEvent("app", "web", ownNetns)); code != http.StatusOK {
		t.Fatalf("add web: %d %s", code, msg)
	}
	ev := p.next(t)
	if ev.Kind != zds.KindAdd || ev.UID != "uid-web" || ev.Info != (zds.WorkloadInfo{Name: "web", Namespace: "app", ServiceAccount: "web-sa"}) {
		t.Fatalf("proxy got %+v, want AddWorkload of web", ev)
	}
	if a, _ := h.rules.counts(); a != 1 {
		t.Fatalf("rules applied %d times, want 1", a)
	}
	if !h.probes.has("10.244.0.3") {
		t.Fatal("pod IP not exempted for probes")
	}

	for _, c := range []struct {
		name string
		body any
		code int
		msg  string
	}{
		{"unenrolled namespace", addEvent("plain", "db", ownNetns), 200, "not enrolled"},
		{"pod of another node", addEvent("app", "far", ownNetns), 200, "not enrolled"},
		{"unknown pod", addEvent("app", "ghost", ownNetns), 500, "not found"},
		{"netns path missing", addEvent("app", "api", "/var/run/netns/meshctl-absent"), 500, "opening netns"},
		{"garbage request", []byte("{not json"), 400, "decoding"},
	} {
		code, msg := h.post(c.body)
		if code != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %d %q, want %d containing %q", c.name, code, msg, c.code, c.msg)
		}
	}
	p.quiet(t)
	if a, _ := h.rules.counts(); a != 1 {
		t.Fatalf("rules applied %d times after refused adds, want 1", a)
	}

	// Opting the pod out removes rules and tells the proxy.
	ctx := context.Background()
	web, _ := h.client.CoreV1().Pods("app").Get(ctx, "web", metav1.GetOptions{})
	web.Labels[enroll.DataplaneModeLabel] = enroll.DataplaneModeNone
	if _, err := h.client.CoreV1().Pods("app").Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := p.next(t); ev.Kind != zds.KindDel || ev.UID != "uid-web" {
		t.Fatalf("after opt-out proxy got %+v, want DelWorkload web", ev)
	}
	if _, r := h.rules.counts(); r != 1 {
		t.Fatalf("rules removed %d times, want 1", r)
	}
	if h.probes.has("10.244.0.3") {
		t.Fatal("probe exemption kept after opt-out")
	}

	// Deleting a meshed pod does the same.
	h.post(addEvent("app", "api", ownNetns))
	if ev := p.next(t); ev.Kind != zds.KindAdd || ev.UID != "uid-api" {
		t.Fatalf("proxy got %+v, want AddWorkload api", ev)
	}
	if err := h.client.CoreV1().Pods("app").Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := p.next(t); ev.Kind != zds.KindDel || ev.UID != "uid-api" {
		t.Fatalf("after delete proxy got %+v, want DelWorkload api", ev)
	}
}

func TestAgentFailsPodWhenNoProxy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, namespace("app", true), pod("app", "web", node))
	h.start()
	code, msg := h.post(addEvent("app", "web", ownNetns))
	if code != http.StatusInternalServerError || !strings.Contains(msg, "no proxy") {
		t.Fatalf("add without proxy: %d %q; the pod must not start unmeshed", code, msg)
	}
}

func TestAgentRestartAndProxyRestartKeepPods(t *testing.T) {
	t.Parallel()
	h := newHarness(t, namespace("app", true), pod("app", "web", node), pod("app", "cache", node))
	stop := h.start()
	p := h.proxy()
	p.next(t) // SnapshotSent
	if code, msg := h.post(addEvent("app", "web", ownNetns)); code != 200 {
		t.Fatalf("add: %d %s", code, msg)
	}
	p.next(t)

	// Proxy restart: the new connection gets the pod in its snapshot.
	p.c.Close()
	p2 := h.proxy()
	if ev := p2.next(t); ev.Kind != zds.KindAdd || ev.UID != "uid-web" {
		t.Fatalf("snapshot after proxy restart: %+v", ev)
	}
	if ev := p2.next(t); ev.Kind != zds.KindSnapshotSent {
		t.Fatalf("snapshot end: %+v", ev)
	}

	// Agent restart. Meanwhile the state file gains a pod whose netns is
	// gone (kept, not dropped) and a pod deleted while the agent was down.
	stop()
	if _, r := h.rules.counts(); r != 0 {
		t.Fatalf("agent exit removed rules of running pods (%d)", r)
	}
	recs, err := loadState(filepath.Join(h.dir, "state"))
	if err != nil || len(recs) != 1 {
		t.Fatalf("state after exit: %v, %v", recs, err)
	}
	recs["uid-cache"] = podRecord{Namespace: "app", Name: "cache", Netns: "/var/run/netns/meshctl-gone"}
	recs["uid-old"] = podRecord{Namespace: "app", Name: "old", Netns: ownNetns}
	if err := saveState(filepath.Join(h.dir, "state"), recs); err != nil {
		t.Fatal(err)
	}
	h.start()
	if a, r := h.rules.counts(); a != 2 || r != 0 {
		t.Fatalf("after restart rules applied %d (want 2: reapplied) removed %d (want 0)", a, r)
	}
	if n := h.probes.setupCount(); n != 2 || !h.probes.has("10.244.0.3") {
		t.Fatalf("probe SNAT after restart: %d setups (want 2), web's IP kept: %v", n, h.probes.has("10.244.0.3"))
	}
	p3 := h.proxy()
	got := map[string]zds.Kind{}
	for {
		ev := p3.next(t)
		if ev.Kind == zds.KindSnapshotSent {
			break
		}
		got[ev.UID] = ev.Kind
	}
	want := map[string]zds.Kind{"uid-web": zds.KindAdd, "uid-cache": zds.KindKeep}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("snapshot after agent restart %v, want %v", got, want)
	}
	// The kept pod is still the agent's: deleting it reaches the proxy.
	if err := h.client.CoreV1().Pods("app").Delete(context.Background(), "cache", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := p3.next(t); ev.Kind != zds.KindDel || ev.UID != "uid-cache" {
		t.Fatalf("proxy got %+v, want DelWorkload cache", ev)
	}
}
