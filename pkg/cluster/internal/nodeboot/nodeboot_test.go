package nodeboot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshctl/meshctl/internal/testenv"
)

func TestPairs(t *testing.T) {
	got, err := Pairs([]string{"10.10.0.0/16", "fd00:10:10::/56"}, []string{"10.255.10.0/24", "fd00:10:255::/112"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.10.0.0/16=10.255.10.0/24", "fd00:10:10::/56=fd00:10:255::/112"}
	if !slices.Equal(got, want) {
		t.Errorf("dual stack: %q, want %q", got, want)
	}
	if got, _ := Pairs([]string{"fd00:10:10::/56"}, []string{"10.255.10.0/24"}); len(got) != 0 {
		t.Errorf("no family in common: %q, want none", got)
	}
	if _, err := Pairs([]string{"10.10.0.0/33"}, []string{"10.255.10.0/24"}); err == nil || !strings.Contains(err.Error(), `pod subnet "10.10.0.0/33"`) {
		t.Errorf("bad pod subnet: %v", err)
	}
}

func TestInstallScriptAppliesTheRulesAndEnablesTheUnitWithoutStartingIt(t *testing.T) {
	s := string(InstallScript([]string{"10.10.0.0/16=10.255.10.0/24"}))
	for _, want := range []string{
		"cat > " + ScriptPath + ".tmp",
		"ExecStartPre=-/bin/sh " + ScriptPath + " rules 10.10.0.0/16=10.255.10.0/24\n",
		"Before=kubelet.service\n",
		"ln -sf " + unitPath + " " + wantsLink + "\n",
		"/bin/sh " + ScriptPath + " rules 10.10.0.0/16=10.255.10.0/24\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("install script lacks %q:\n%s", want, s)
		}
	}
	// Leases are released at a later start only: at creation they are
	// this start's own.
	if strings.Contains(s, "systemctl") || strings.Contains(s, ScriptPath+" leases\n/") {
		t.Errorf("install script starts the unit or releases leases:\n%s", s)
	}
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// inNetns runs fn on a thread inside the named namespace.
func inNetns(name string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return err
	}
	defer netns.Set(orig) //nolint:errcheck // restoring the test's own netns
	return fn()
}

// dial connects from namespace ns to addr and reads the one byte the test's
// listener writes.
func dial(ns, addr string, timeout time.Duration) error {
	return inNetns(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(timeout))
		_, err = c.Read(make([]byte, 1))
		return err
	})
}

// TestIntegrationRulesRefuseUnrewrittenServiceAddresses builds a "node"
// network namespace with two "pods" and an "outside" behind its default
// route (which drops what it is sent, as the world beyond a kind node
// does not answer for a Service address), and a kube-proxy-like iptables
// DNAT of one Service address to the second pod, in each family. Before
// boot.sh rules, a pod's dial to a Service address without a DNAT times
// out (what CoreDNS meets after a restart); after it, the dial is refused
// with "unreachable", the DNATed address still answers from a pod and from
// the node itself (host processes are not matched), and running the rules
// again leaves one rule.
func TestIntegrationRulesRefuseUnrewrittenServiceAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, tool := range []string{"ip", "iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	prefix := fmt.Sprintf("mboot%d-", rand.IntN(1e6))
	node, pod, server, outside := prefix+"node", prefix+"pod", prefix+"srv", prefix+"out"
	for _, ns := range []string{node, pod, server, outside} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	in := func(ns string, args ...string) {
		t.Helper()
		sh(t, append([]string{"ip", "netns", "exec", ns}, args...)...)
	}
	link := func(ns, ifname, peerNS, peerIf string) {
		t.Helper()
		sh(t, "ip", "link", "add", prefix[:5]+"tmp", "type", "veth", "peer", "name", prefix[:5]+"tmq")
		sh(t, "ip", "link", "set", prefix[:5]+"tmp", "netns", ns, "name", ifname)
		sh(t, "ip", "link", "set", prefix[:5]+"tmq", "netns", peerNS, "name", peerIf)
		in(ns, "ip", "link", "set", ifname, "up")
		in(peerNS, "ip", "link", "set", peerIf, "up")
	}
	for _, ns := range []string{node, pod, server, outside} {
		in(ns, "ip", "link", "set", "lo", "up")
		in(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0")
	}
	link(pod, "eth0", node, "vpod")
	link(server, "eth0", node, "vsrv")
	link(node, "eth0", outside, "eth0")
	in(node, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	type family struct {
		podNet, svcNet                string
		pod, podGW, srv, srvGW        string
		node, out                     string
		svc, svcNoEndpoints, iptables string
		bits, gwBits                  string
	}
	fams := []family{
		{podNet: "10.10.0.0/16", svcNet: "10.255.10.0/24", pod: "10.10.0.2", podGW: "10.10.0.1", srv: "10.10.1.2", srvGW: "10.10.1.1",
			node: "172.31.250.1", out: "172.31.250.2", svc: "10.255.10.1", svcNoEndpoints: "10.255.10.2", iptables: "iptables", bits: "24", gwBits: "30"},
		{podNet: "fd00:10:10::/56", svcNet: "fd00:10:255::/112", pod: "fd00:10:10::2", podGW: "fd00:10:10::1", srv: "fd00:10:10:1::2", srvGW: "fd00:10:10:1::1",
			node: "fd00:172::1", out: "fd00:172::2", svc: "fd00:10:255::1", svcNoEndpoints: "fd00:10:255::2", iptables: "ip6tables", bits: "64", gwBits: "64"},
	}
	var pairs []string
	for _, f := range fams {
		fam := "-4"
		if strings.Contains(f.pod, ":") {
			fam = "-6"
		}
		in(pod, "ip", "addr", "add", f.pod+"/"+f.bits, "dev", "eth0", "nodad")
		in(node, "ip", "addr", "add", f.podGW+"/"+f.bits, "dev", "vpod", "nodad")
		in(pod, "ip", fam, "route", "add", "default", "via", f.podGW)
		in(server, "ip", "addr", "add", f.srv+"/"+f.bits, "dev", "eth0", "nodad")
		in(node, "ip", "addr", "add", f.srvGW+"/"+f.bits, "dev", "vsrv", "nodad")
		in(server, "ip", fam, "route", "add", "default", "via", f.srvGW)
		in(node, "ip", "addr", "add", f.node+"/"+f.gwBits, "dev", "eth0", "nodad")
		in(outside, "ip", "addr", "add", f.out+"/"+f.gwBits, "dev", "eth0", "nodad")
		in(node, "ip", fam, "route", "add", "default", "via", f.out)
		// kube-proxy's part: the Service address with an endpoint is
		// rewritten before routing (pods) and in OUTPUT (the node's own).
		for _, chain := range []string{"PREROUTING", "OUTPUT"} {
			in(node, f.iptables, "-t", "nat", "-A", chain, "-d", f.svc, "-p", "tcp", "--dport", "443",
				"-j", "DNAT", "--to-destination", net.JoinHostPort(f.srv, "8443"))
		}
		pairs = append(pairs, f.podNet+"="+f.svcNet)
	}
	// The server pod's listener, both families, one byte to each caller.
	for _, f := range fams {
		var ln net.Listener
		if err := inNetns(server, func() (err error) {
			ln, err = net.Listen("tcp", net.JoinHostPort(f.srv, "8443"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte{1})
				c.Close()
			}
		}()
	}

	// Before: the dial to an unrewritten Service address leaves the node
	// and is never answered.
	for _, f := range fams {
		err := dial(pod, net.JoinHostPort(f.svcNoEndpoints, "443"), time.Second)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%s before the rules: %v, want a timeout (the test's outside must drop it)", f.svcNoEndpoints, err)
		}
	}

	bootFile := filepath.Join(t.TempDir(), "boot.sh")
	if err := os.WriteFile(bootFile, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		in(node, append([]string{"sh", bootFile, "rules"}, pairs...)...)
	}
	for _, fam := range []string{"-4", "-6"} {
		out, err := exec.Command("ip", "netns", "exec", node, "ip", fam, "rule", "show", "pref", "31000").CombinedOutput()
		if err != nil || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 || !strings.Contains(string(out), "unreachable") {
			t.Errorf("ip %s rule show pref 31000 after two runs: %q (%v), want one unreachable rule", fam, out, err)
		}
	}

	for _, f := range fams {
		// Refused at once, not timed out: the client dials again.
		err := dial(pod, net.JoinHostPort(f.svcNoEndpoints, "443"), 5*time.Second)
		if !errors.Is(err, syscall.EHOSTUNREACH) && !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("pod → %s with the rules: %v, want host or network unreachable", f.svcNoEndpoints, err)
		}
		// What kube-proxy rewrites is untouched, from a pod and the node.
		if err := dial(pod, net.JoinHostPort(f.svc, "443"), 5*time.Second); err != nil {
			t.Errorf("pod → %s (DNATed to %s) with the rules: %v", f.svc, f.srv, err)
		}
		if err := dial(node, net.JoinHostPort(f.svc, "443"), 5*time.Second); err != nil {
			t.Errorf("node → %s (DNATed to %s) with the rules: %v", f.svc, f.srv, err)
		}
	}
}

// TestIntegrationLeasesReleasedToANewControllerManager runs boot.sh leases
// against a real kube-apiserver with a real kube-controller-manager
// waiting for its lease, as after a node's restart: the lease is held by
// "node1_dead" (this node's previous start), and the controller manager
// would wait an hour of it not changing (the lease's duration here) before
// it took over. Released, it takes the lease at its next try. A lease of
// another host and one renewed since the "boot" are left alone.
func TestIntegrationLeasesReleasedToANewControllerManager(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	kubectl, err := testenv.Kubectl()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	if _, err := testenv.ControllerManager(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs := kubernetes.NewForConfigOrDie(env.Config)
	leases := cs.CoordinationV1().Leases("kube-system")
	before := metav1.NewMicroTime(time.Now().Add(-2 * time.Second))
	lease := func(name, holder string) *coordinationv1.Lease {
		// A candidate waits the lease's own duration (client-go reads
		// the record's, 15 s as the controller manager writes it) of the
		// record not changing: an hour here, longer than the test.
		d := int32(3600)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d, AcquireTime: &before, RenewTime: &before}}
	}
	for _, l := range []*coordinationv1.Lease{lease("kube-controller-manager", "node1_dead"), lease("kube-scheduler", "node2_alive")} {
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.StartControllersWith([]string{"--leader-elect=true", "--leader-elect-retry-period=1s"}, "serviceaccount-token-controller"); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "admin.conf")
	if err := os.WriteFile(kc, testenv.Kubeconfig(t, "testenv", env.Config), 0o600); err != nil {
		t.Fatal(err)
	}
	bootFile := filepath.Join(t.TempDir(), "boot.sh")
	if err := os.WriteFile(bootFile, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(host string, boot time.Time) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "sh", bootFile, "leases")
		cmd.Env = append(os.Environ(), "MESHCTL_KUBECONFIG="+kc, "MESHCTL_HOSTNAME="+host,
			"MESHCTL_BOOT="+strconv.FormatInt(boot.Unix(), 10),
			"PATH="+filepath.Dir(kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("boot.sh leases: %v: %s", err, out.String())
		}
		return out.String()
	}
	holder := func(name string) string {
		t.Helper()
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}

	// The controller manager is up and waiting behind node1_dead's lease.
	time.Sleep(3 * time.Second)
	if h := holder("kube-controller-manager"); h != "node1_dead" {
		t.Fatalf("before the release the lease is held by %q, want node1_dead (the controller manager did not wait?)", h)
	}
	out := run("node1", time.Now())
	if !strings.Contains(out, "released kube-controller-manager, held by node1_dead") || strings.Contains(out, "kube-scheduler") {
		t.Errorf("boot.sh leases said %q", out)
	}
	if h := holder("kube-scheduler"); h != "node2_alive" {
		t.Errorf("another host's lease: held by %q, want node2_alive", h)
	}
	host, _ := os.Hostname()
	deadline := time.Now().Add(time.Minute)
	for !strings.HasPrefix(holder("kube-controller-manager"), host+"_") {
		if time.Now().After(deadline) {
			t.Fatalf("the controller manager did not take the released lease within a minute: held by %q", holder("kube-controller-manager"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Its own lease, renewed since a "boot" a minute ago: kept.
	taken := holder("kube-controller-manager")
	if out := run(host, time.Now().Add(-time.Minute)); strings.Contains(out, "released") {
		t.Errorf("a lease renewed since the start was released: %q", out)
	}
	if h := holder("kube-controller-manager"); h != taken {
		t.Errorf("the live holder's lease changed to %q, want %q", h, taken)
	}
}
