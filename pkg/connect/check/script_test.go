package check

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeNC stands in for busybox nc on the host (which has none): it answers
// per address as a server, a refusing host or another cluster's server
// would, and one address answers only from the second attempt on.
const fakeNC = `#!/bin/sh
# argv: -w SECONDS ADDRESS PORT
addr=$3
case "$addr" in
10.0.0.1) echo "meshctl-check-server c1" ;;
fd00::1) echo "meshctl-check-server c2" ;;
10.0.0.2) echo "nc: can't connect to remote host (10.0.0.2): Connection refused" >&2; exit 1 ;;
10.0.0.3) echo "meshctl-check-server c9" ;;
10.0.0.4)
  if [ -f "$STATE/seen" ]; then echo "meshctl-check-server c1"; else touch "$STATE/seen"; exit 1; fi ;;
10.0.0.5) echo "meshctl-check-server c4" ;;
*) exit 1 ;;
esac
`

// TestScript runs the client script with sh, and parses what it printed.
func TestScript(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this machine")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nc"), []byte(fakeNC), 0o755); err != nil {
		t.Fatal(err)
	}
	probes := []Probe{
		{From: "c1", To: "c1", Path: PathPod, Address: "10.0.0.1"},
		{From: "c1", To: "c2", Path: PathPod, Address: "fd00::1"},
		{From: "c1", To: "c2", Path: PathService, Address: "10.0.0.2"},
		{From: "c1", To: "c3", Path: PathGateway, Status: StatusViaGateway},
		{From: "c1", To: "c1", Path: PathService, Address: "10.0.0.3"},
		{From: "c1", To: "c1", Path: PathService, Address: "10.0.0.4"},
		// Meshed: another network's server by the client's own VIP.
		{From: "c1", To: "c4", Path: PathGateway, Address: "10.0.0.5"},
	}
	cmd := exec.Command(sh, "-c", script(probes, 2))
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "STATE="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	parse(string(out), probes, 2)
	want := []struct{ status, err string }{
		{StatusOK, ""},
		{StatusOK, ""},
		{StatusFailed, "10.0.0.2:8080: nc: can't connect to remote host (10.0.0.2): Connection refused (after 2 attempts)"},
		{StatusViaGateway, ""},
		{StatusFailed, "10.0.0.3:8080: meshctl-check-server c9 (after 2 attempts)"},
		{StatusOK, ""},
		{StatusOK, ""},
	}
	for i, w := range want {
		if probes[i].Status != w.status || probes[i].Error != w.err {
			t.Errorf("probe %d (%s): %s %q, want %s %q", i, probes[i].Address, probes[i].Status, probes[i].Error, w.status, w.err)
		}
	}
	if strings.Count(string(out), "RESULT") != 6 {
		t.Errorf("want 6 results (the untested gateway entry is not run):\n%s", out)
	}
}

func TestParseMissingResult(t *testing.T) {
	t.Parallel()
	probes := []Probe{{Path: PathPod, Address: "10.0.0.1"}, {Path: PathService, Address: "10.0.0.2"}}
	parse("RESULT 0 ok\nRESULT 7 ok\ngarbage\n", probes, 3)
	if probes[0].Status != StatusOK || probes[1].Status != StatusFailed || !strings.Contains(probes[1].Error, "reported nothing") {
		t.Errorf("%+v", probes)
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	mk := func(name, network string, pod, svc []string) *run {
		r := &run{podIPs: pod, svcIPs: svc}
		r.plan.Name, r.plan.Network = name, network
		return r
	}
	runs := []*run{
		mk("c1", "n1", []string{"10.10.0.5"}, []string{"10.255.10.7"}),
		mk("c2", "n1", []string{"10.20.0.5", "fd00:10:20::5"}, []string{"10.255.20.7", "fd00:10:255:20::7"}),
		mk("c3", "n2", []string{"10.30.0.5"}, []string{"10.255.30.7"}),
	}
	var got []string
	for _, p := range New(nil).plan(runs[0], runs) {
		got = append(got, p.To+"/"+p.Path+"/"+p.Address+"/"+p.Status)
	}
	want := "c1/pod/10.10.0.5/ c1/service/10.255.10.7/ c2/pod/10.20.0.5/ c2/pod/fd00:10:20::5/ c2/service/10.255.20.7/ c2/service/fd00:10:255:20::7/ c3/gateway//via gateway"
	if strings.Join(got, " ") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
}
