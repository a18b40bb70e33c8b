package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/zds"
)

// TestZDSAdapterSpeaksToTheNodeAgentServer runs the real ZDS server on a
// unix socket and the adapter against it: a snapshot arrives as events with
// the netns fd, handle's answer is the Ack the agent sees, Del reaches it.
func TestZDSAdapterSpeaksToTheNodeAgentServer(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "zds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "z.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := zds.NewServer(zds.WithSocketPath(sock))
	go func() { _ = srv.Serve(ctx, ln) }()

	netnsFile := func() *os.File {
		f, err := os.Open("/proc/self/ns/net")
		if err != nil {
			t.Skipf("cannot open a netns file: %v", err)
		}
		return f
	}
	// Known before the proxy connects: delivered in the snapshot.
	srv.KeepWorkload("kept-uid")

	var mu sync.Mutex
	var got []string
	handle := func(ev WorkloadEvent) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ev.Kind.String()+":"+ev.UID+":"+ev.Name+"/"+ev.Namespace+"/"+ev.ServiceAccount)
		if ev.Netns != nil {
			ev.Netns.Close()
		}
		if ev.UID == "refused-uid" {
			return errors.New("no certificate for this pod")
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- ZDS(sock).Run(ctx, handle) }()

	deadline := time.Now().Add(10 * time.Second)
	for srv.Connected() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the adapter never connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	addCtx, addCancel := context.WithTimeout(ctx, 10*time.Second)
	defer addCancel()
	if err := srv.AddWorkload(addCtx, zds.Workload{UID: "pod-uid", Info: zds.WorkloadInfo{Name: "web", Namespace: "shop", ServiceAccount: "web-sa"}, Netns: netnsFile()}); err != nil {
		t.Fatalf("add: %v", err)
	}
	err = srv.AddWorkload(addCtx, zds.Workload{UID: "refused-uid", Info: zds.WorkloadInfo{Name: "x", Namespace: "y", ServiceAccount: "z"}, Netns: netnsFile()})
	if err == nil || !strings.Contains(err.Error(), "no certificate for this pod") {
		t.Errorf("the agent should see the proxy's refusal, got %v", err)
	}
	if err := srv.DeleteWorkload(addCtx, "pod-uid"); err != nil {
		t.Fatalf("del: %v", err)
	}
	mu.Lock()
	events := strings.Join(got, " ")
	mu.Unlock()
	want := "keep:kept-uid:// snapshot_sent::// add:pod-uid:web/shop/web-sa add:refused-uid:x/y/z del:pod-uid://"
	if events != want {
		t.Errorf("events\n%s\nwant\n%s", events, want)
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("Run returned nil after its context ended")
	}
}
