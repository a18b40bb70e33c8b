package routes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIntegrationReconcilerFollowsAMovedPeer runs the node-side route
// reconciler (routes.sh) in a network namespace standing in for a kind
// node, with getent answering from a file standing in for Docker's DNS: it
// installs the routes by peer name, check finds nothing stale; when the
// peer's address changes, check names the stale routes and the running
// reconciler moves them, with no meshctl command.
func TestIntegrationReconcilerFollowsAMovedPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	ns := fmt.Sprintf("mctlrec%d", rand.IntN(1e6))
	sh(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	sh(t, "ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	sh(t, "ip", "-n", ns, "addr", "add", "192.168.88.1/24", "dev", "eth0")
	sh(t, "ip", "-n", ns, "addr", "add", "fd88::1/64", "dev", "eth0", "nodad")
	sh(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", ns, "link", "set", "eth1", "up")

	dir := t.TempDir()
	script := filepath.Join(dir, "routes.sh")
	routes := filepath.Join(dir, "routes")
	hosts := filepath.Join(dir, "hosts")
	bin := filepath.Join(dir, "bin")
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	write(script, reconcilerScript, 0o755)
	// getent ahostsv4|ahostsv6 NAME, answered from the hosts file.
	write(filepath.Join(bin, "getent"), `#!/bin/sh
while read -r ip name; do
	[ "$name" = "$2" ] || continue
	case "$1:$ip" in
	ahostsv4:*:*) ;;
	ahostsv4:*|ahostsv6:*:*) echo "$ip STREAM $name" ;;
	esac
done < "$FAKE_HOSTS"
`, 0o755)
	write(routes, string(RoutesByName([]Route{
		{Dst: netip.MustParsePrefix("10.20.0.0/24"), ViaNode: "peer-control-plane"},
		{Dst: netip.MustParsePrefix("fd00:10:20::/64"), ViaNode: "peer-control-plane"},
	})), 0o644)
	write(hosts, "192.168.88.5 peer-control-plane\nfd88::5 peer-control-plane\n", 0o644)

	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "MESHCTL_ROUTES=" + routes, "FAKE_HOSTS=" + hosts, "MESHCTL_ROUTES_INTERVAL=0.2"}
	inNode := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, "env"}, append(env, args...)...)...)
	}
	check := func() string {
		t.Helper()
		out, err := inNode(context.Background(), "sh", script, "check").CombinedOutput()
		if err != nil {
			t.Fatalf("routes.sh check: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := check(); !strings.Contains(got, "10.20.0.0/24 via no route, but peer-control-plane is at 192.168.88.5") {
		t.Errorf("check before any route:\n%s", got)
	}

	// ip netns exec and env exec the shell: the context's kill ends it
	// (its last sleep ends by itself).
	ctx, cancel := context.WithCancel(context.Background())
	run := inNode(ctx, "sh", script, "run")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = run.Wait()
	})

	waitClean := func(what string) {
		t.Helper()
		// Bounded only so that a broken reconciler fails instead of
		// hanging; it normally takes one interval.
		deadline := time.Now().Add(time.Minute)
		for {
			got := check()
			if got == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: routes still stale:\n%s", what, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitClean("first run")
	out, _ := exec.Command("ip", "-n", ns, "route", "show", "10.20.0.0/24").CombinedOutput()
	if !strings.Contains(string(out), "via 192.168.88.5") {
		t.Errorf("route: %s", out)
	}

	// The peer moves (a Docker restart): check names what is stale until
	// the reconciler follows.
	write(hosts, "192.168.88.7 peer-control-plane\nfd88::7 peer-control-plane\n", 0o644)
	waitClean("after the peer moved")
	out, _ = exec.Command("ip", "-n", ns, "-6", "route", "show", "fd00:10:20::/64").CombinedOutput()
	if !strings.Contains(string(out), "via fd88::7") {
		t.Errorf("route: %s", out)
	}
}

// TestIntegrationReconcilerCheckNamesAnUnresolvablePeer: a peer whose name
// does not resolve (its container stopped) is named, not skipped.
func TestIntegrationReconcilerCheckNamesAnUnresolvablePeer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	dir := t.TempDir()
	routes := filepath.Join(dir, "routes")
	if err := os.WriteFile(routes, []byte("10.99.0.0/24 gone-node\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	_ = os.Mkdir(bin, 0o755)
	_ = os.WriteFile(filepath.Join(bin, "getent"), []byte("#!/bin/sh\nexit 2\n"), 0o755)
	script := filepath.Join(dir, "routes.sh")
	_ = os.WriteFile(script, []byte(reconcilerScript), 0o755)
	cmd := exec.Command("sh", script, "check")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "MESHCTL_ROUTES="+routes)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "10.99.0.0/24: peer node gone-node does not resolve (is it running?)" {
		t.Errorf("check: %v: %q", err, out)
	}
}

// TestInstallScriptRestartsOnlyOnChange runs the install script against
// files in a temporary directory with a systemctl that logs its calls: the
// first install and any change of a file, or a unit found disabled or not
// running, (re)start the reconciler; a rerun that would write the same
// files to a running unit leaves it alone.
func TestInstallScriptRestartsOnlyOnChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(dir, "calls")
	// is-active and is-enabled answer from files, as the test sets them.
	systemctl := `#!/bin/sh
echo "$*" >> "` + calls + `"
case "$1" in
is-active) [ -f "` + dir + `/active" ] ;;
is-enabled) [ -f "` + dir + `/enabled" ] ;;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte(systemctl), 0o755); err != nil {
		t.Fatal(err)
	}
	f := nodeFiles{routes: filepath.Join(dir, "kind/meshctl/routes"), script: filepath.Join(dir, "kind/meshctl/routes.sh"), unit: filepath.Join(dir, "unit")}
	rs := []Route{{Dst: netip.MustParsePrefix("10.20.0.0/24"), ViaNode: "peer-control-plane"}}
	moved := []Route{{Dst: netip.MustParsePrefix("10.20.0.0/24"), ViaNode: "peer-worker"}}
	set := func(name string, on bool) {
		t.Helper()
		p := filepath.Join(dir, name)
		if !on {
			_ = os.Remove(p)
			return
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	install := func(rs []Route) (restarted bool) {
		t.Helper()
		_ = os.Remove(calls)
		cmd := exec.Command("sh", "-s")
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		cmd.Stdin = strings.NewReader(string(installScript(f, rs)))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("install script: %v: %s", err, out)
		}
		got, _ := os.ReadFile(calls)
		return strings.Contains(string(got), "restart "+ReconcilerUnitName)
	}
	steps := []struct {
		name     string
		prepare  func()
		rs       []Route
		restarts bool
	}{
		{"first install", func() {}, rs, true},
		{"rerun, running", func() { set("active", true); set("enabled", true) }, rs, false},
		{"routes changed", func() {}, moved, true},
		{"rerun after the change", func() {}, moved, false},
		{"unit stopped", func() { set("active", false) }, moved, true},
		{"unit disabled", func() { set("active", true); set("enabled", false) }, moved, true},
		{"script edited on the node", func() {
			set("enabled", true)
			if err := os.WriteFile(f.script, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, moved, true},
		{"routes file lost", func() { _ = os.Remove(f.routes) }, moved, true},
		{"rerun, all as written", func() {}, moved, false},
	}
	for _, s := range steps {
		s.prepare()
		if got := install(s.rs); got != s.restarts {
			t.Errorf("%s: restarted = %v, want %v", s.name, got, s.restarts)
		}
	}
	got, err := os.ReadFile(f.routes)
	if err != nil || string(got) != string(RoutesByName(moved)) {
		t.Errorf("routes file = %q, %v; want %q", got, err, RoutesByName(moved))
	}
	if got, err := os.ReadFile(f.script); err != nil || string(got) != reconcilerScript {
		t.Errorf("script not rewritten: %v", err)
	}
}

// TestConnectScriptAddsRoutesThenInstalls runs Connect's one script per
// node with an `ip` and a `systemctl` that log their calls: the batch goes
// to `ip -batch -` before the reconciler is installed, and a batch that
// fails stops the script, naming it, with nothing installed.
func TestConnectScriptAddsRoutesThenInstalls(t *testing.T) {
	t.Parallel()
	for _, ipFails := range []bool{false, true} {
		dir := t.TempDir()
		bin := filepath.Join(dir, "bin")
		if err := os.Mkdir(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		log := filepath.Join(dir, "log")
		exit := "0"
		if ipFails {
			exit = "2"
		}
		for name, body := range map[string]string{
			"ip":        "#!/bin/sh\necho \"ip $*\" >> " + log + "\ncat >> " + log + "\nexit " + exit + "\n",
			"systemctl": "#!/bin/sh\necho \"systemctl $*\" >> " + log + "\n",
		} {
			if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		f := nodeFiles{routes: filepath.Join(dir, "kind/meshctl/routes"), script: filepath.Join(dir, "kind/meshctl/routes.sh"), unit: filepath.Join(dir, "unit")}
		rs := []Route{{Dst: netip.MustParsePrefix("10.20.0.0/24"), Via: netip.MustParseAddr("172.18.0.3"), ViaNode: "peer-control-plane"}}
		cmd := exec.Command("sh", "-s")
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		cmd.Stdin = strings.NewReader(string(connectScript(f, rs)))
		out, err := cmd.CombinedOutput()
		got, _ := os.ReadFile(log)
		if ipFails {
			if err == nil || !strings.Contains(string(out), "adding 1 routes failed") || strings.Contains(string(got), "systemctl") {
				t.Errorf("failing batch: %v, %q; calls:\n%s", err, out, got)
			}
			if _, serr := os.Stat(f.routes); serr == nil {
				t.Errorf("failing batch: the routes file was written")
			}
			continue
		}
		want := "ip -batch -\nroute replace 10.20.0.0/24 via 172.18.0.3\nsystemctl daemon-reload"
		if err != nil || !strings.HasPrefix(string(got), want) || !strings.Contains(string(got), "systemctl restart "+ReconcilerUnitName) {
			t.Errorf("script: %v, %q; calls:\n%s\nwant them to begin\n%s", err, out, got, want)
		}
	}
}
