package proxy

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/netnstest"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/redirect"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// sandbox is a pod netns with the production in-pod rules, joined by a veth
// to a peer netns at 10.201.<n>.1 where an app echoes; the pod is .2.
type sandbox struct{ pod, peer *os.File }

func newSandbox(t *testing.T, n int) sandbox {
	t.Helper()
	s := sandbox{pod: netnstest.New(t), peer: netnstest.New(t)}
	sub := "10.201." + strconv.Itoa(n) + "."
	// Interface names live inside the anonymous namespaces: no clash with
	// other runs.
	if err := netnstest.Veth(s.pod, "eth0", netip.MustParsePrefix(sub+"2/24"), s.peer, "eth0", netip.MustParsePrefix(sub+"1/24")); err != nil {
		t.Fatal(err)
	}
	if err := redirect.New().Apply(s.pod); err != nil {
		t.Fatalf("redirect: %v", err)
	}
	app := netnstest.Listen(t, s.peer, sub+"1:8080")
	go func() {
		for {
			c, err := app.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return s
}

// talk dials the peer's app from the pod's netns (captured by the pod's
// OUTPUT REDIRECT into the proxy's 15001) and returns the echo.
func (s sandbox) talk(n int) (string, error) {
	var got string
	err := netnstest.Do(s.pod, func() error {
		c, err := net.DialTimeout("tcp", "10.201."+strconv.Itoa(n)+".1:8080", 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "ping"); err != nil {
			return err
		}
		_ = c.(*net.TCPConn).CloseWrite()
		b, err := io.ReadAll(c)
		got = string(b)
		return err
	})
	return got, err
}

func dupFile(t *testing.T, f *os.File) *os.File {
	t.Helper()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), f.Name())
}

// TestIntegrationRecreatedSandboxGetsNewListeners: the kubelet recreates a
// pod's sandbox (same pod UID, new netns) and the agent sends AddWorkload
// again. The proxy must move the pod's listeners into the new netns: traffic
// there is captured and reaches its destination, and the old netns's
// listeners are gone. A re-sent Add with the same netns keeps the listeners.
func TestIntegrationRecreatedSandboxGetsNewListeners(t *testing.T) {
	netnstest.Require(t)
	c, err := meshca.NewTest("recreate")
	if err != nil {
		t.Fatal(err)
	}
	old, recreated := newSandbox(t, 1), newSandbox(t, 2)
	agent := &fakeAgent{sessions: make(chan chan evReq)}
	p, err := New(WithWorkloadEvents(agent), WithFetcher(certs.FromCA(c, time.Hour, time.Now)), WithAddresses("", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	s := make(chan evReq)
	agent.sessions <- s
	add := func(ns *os.File) {
		t.Helper()
		if err := send(t, s, WorkloadEvent{Kind: EventAdd, UID: "uid-1", Name: "app", Namespace: "ns", ServiceAccount: "sa", Netns: dupFile(t, ns)}); err != nil {
			t.Fatal(err)
		}
	}
	add(old.pod)
	if got, err := old.talk(1); err != nil || got != "ping" {
		t.Fatalf("first sandbox: %q, %v", got, err)
	}
	// The same netns again (a snapshot after an agent restart): kept.
	add(old.pod)
	if got, err := old.talk(1); err != nil || got != "ping" {
		t.Fatalf("first sandbox after a re-sent Add: %q, %v", got, err)
	}

	add(recreated.pod)
	if got, err := recreated.talk(2); err != nil || got != "ping" {
		t.Fatalf("recreated sandbox is not served: %q, %v", got, err)
	}
	if d := slices.Collect(maps.Values(p.Dump().WorkloadState)); len(d) != 1 || fmt.Sprint(d[0].Addresses) != "[10.201.2.2]" {
		t.Errorf("workloads after the recreate: %+v", d)
	}
	if got, err := old.talk(1); err == nil {
		t.Errorf("the old sandbox's listeners still serve (%q)", got)
	}
}
