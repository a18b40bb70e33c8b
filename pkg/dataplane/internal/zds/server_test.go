package zds

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/testutil"
)

// startServer serves on a fresh socket and returns the socket path.
func startServer(t *testing.T, opts ...Option) (*Server, string, *prometheus.Registry) {
	t.Helper()
	dir, err := os.MkdirTemp("", "zds") // short: sun_path is 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "z.sock")
	reg := prometheus.NewRegistry()
	s := NewServer(append([]Option{WithSocketPath(path), WithRegisterer(reg)}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testutil.Eventually(t, "socket listening", func() bool { _, err := os.Stat(path); return err == nil })
	return s, path, reg
}

// ownNetns opens this process's netns: a real netns fd, no root needed.
func ownNetns(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func sameFile(t *testing.T, a, b *os.File) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Fstat(int(a.Fd()), &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(int(b.Fd()), &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

func recv(t *testing.T, c *Client) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := c.Recv(ctx)
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return ev
}

// proxy acks every request and forwards it, as a well-behaved ztunnel does.
func proxy(t *testing.T, path string) (*Client, <-chan Event) {
	t.Helper()
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch := make(chan Event, 16)
	go func() {
		defer close(ch)
		for {
			ev, err := c.Recv(context.Background())
			if err != nil {
				return
			}
			if err := c.Ack(nil); err != nil {
				return
			}
			ch <- ev
		}
	}()
	return c, ch
}

func next(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("proxy connection ended")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return Event{}
}

func TestServerSnapshotThenStream(t *testing.T) {
	t.Parallel()
	s, path, reg := startServer(t)
	ctx := context.Background()
	ns := ownNetns(t)
	info := WorkloadInfo{Name: "web", Namespace: "default", ServiceAccount: "web-sa"}

	// Before any proxy: recorded, but the caller is told it is not meshed.
	if err := s.AddWorkload(ctx, Workload{UID: "a", Info: info, Netns: ns}); !errors.Is(err, ErrNoProxy) {
		t.Fatalf("AddWorkload without proxy: err = %v, want ErrNoProxy", err)
	}
	s.KeepWorkload("b")

	c, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	add := recv(t, c)
	if add.Kind != KindAdd || add.UID != "a" || add.Info != info || add.Netns == nil {
		t.Fatalf("first snapshot event = %+v, want AddWorkload a with netns", add)
	}
	if !sameFile(t, add.Netns, ns) {
		t.Error("netns fd received is not the pod's netns")
	}
	add.Netns.Close()
	if err := c.Ack(nil); err != nil {
		t.Fatal(err)
	}
	if ev := recv(t, c); ev.Kind != KindKeep || ev.UID != "b" || ev.Netns != nil {
		t.Fatalf("second snapshot event = %+v, want KeepWorkload b", ev)
	}
	c.Ack(nil)
	if ev := recv(t, c); ev.Kind != KindSnapshotSent {
		t.Fatalf("third snapshot event = %+v, want SnapshotSent", ev)
	}
	c.Ack(nil)
	testutil.Eventually(t, "gauge 1 after snapshot", func() bool { return testutil.Gauge(t, reg, "ztunnel_connected") == 1 })

	// After the snapshot: streamed, and AddWorkload waits for the ack.
	errc := make(chan error, 1)
	go func() { errc <- s.AddWorkload(ctx, Workload{UID: "c", Info: info, Netns: ownNetns(t)}) }()
	if ev := recv(t, c); ev.Kind != KindAdd || ev.UID != "c" {
		t.Fatalf("streamed event = %+v, want AddWorkload c", ev)
	} else {
		ev.Netns.Close()
	}
	c.Ack(errors.New("no certificate yet"))
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "no certificate yet") {
		t.Fatalf("AddWorkload refused by proxy: err = %v, want the proxy's reason", err)
	}
	go func() { errc <- s.DeleteWorkload(ctx, "c") }()
	if ev := recv(t, c); ev.Kind != KindDel || ev.UID != "c" {
		t.Fatalf("streamed event = %+v, want DelWorkload c", ev)
	}
	c.Ack(nil)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	c.Close()
	testutil.Eventually(t, "gauge 0 after proxy left", func() bool { return s.Connected() == 0 && testutil.Gauge(t, reg, "ztunnel_connected") == 0 })
}

func TestServerAddGoesToNewestDeleteToAll(t *testing.T) {
	t.Parallel()
	s, path, _ := startServer(t)
	ctx := context.Background()
	_, old := proxy(t, path)
	if ev := next(t, old); ev.Kind != KindSnapshotSent {
		t.Fatalf("old proxy snapshot: %+v", ev)
	}
	_, newer := proxy(t, path)
	if ev := next(t, newer); ev.Kind != KindSnapshotSent {
		t.Fatalf("new proxy snapshot: %+v", ev)
	}
	testutil.Eventually(t, "two proxies connected", func() bool { return s.Connected() == 2 })

	if err := s.AddWorkload(ctx, Workload{UID: "p", Netns: ownNetns(t)}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, newer); ev.Kind != KindAdd || ev.UID != "p" {
		t.Fatalf("newest proxy got %+v, want AddWorkload p", ev)
	}
	if err := s.DeleteWorkload(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan Event{"old": old, "new": newer} {
		if ev := next(t, ch); ev.Kind != KindDel || ev.UID != "p" {
			t.Fatalf("%s proxy got %+v, want DelWorkload p", name, ev)
		}
	}
}

// rawConn speaks to the server below the Client API, to misbehave.
func rawConn(t *testing.T, path string) packetConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return packetConn{c: c}
}

// dropped reports whether the server hung up on pc.
func dropped(pc packetConn) bool {
	for {
		_, fds, err := pc.recv(time.Now().Add(5 * time.Second))
		closeAll(fds)
		if err != nil {
			return errors.Is(err, errPeerClosed) || errors.Is(err, unix.ECONNRESET)
		}
	}
}

func TestServerDropsMisbehavingPeersAndKeepsServing(t *testing.T) {
	t.Parallel()
	s, path, _ := startServer(t)
	soon := func() time.Time { return time.Now().Add(5 * time.Second) }
	bad := map[string]func(pc packetConn) error{
		"garbage hello": func(pc packetConn) error { return pc.send([]byte{0xff, 0x00, 0x13}, nil, soon()) },
		"hello version 2": func(pc packetConn) error {
			return pc.send([]byte{0x08, 0x02}, nil, soon())
		},
		"hello with an fd": func(pc packetConn) error {
			f := ownNetns(t)
			defer f.Close()
			return pc.send(marshalHello(), f, soon())
		},
		"garbage after hello": func(pc packetConn) error {
			if err := pc.send(marshalHello(), nil, soon()); err != nil {
				return err
			}
			return pc.send([]byte("GET / HTTP/1.1\r\n"), nil, soon())
		},
		"ack carrying an fd": func(pc packetConn) error {
			if err := pc.send(marshalHello(), nil, soon()); err != nil {
				return err
			}
			if _, _, err := pc.recv(soon()); err != nil { // SnapshotSent
				return err
			}
			f := ownNetns(t)
			defer f.Close()
			return pc.send(marshalAck(""), f, soon())
		},
		"unsolicited ack": func(pc packetConn) error {
			if err := pc.send(marshalHello(), nil, soon()); err != nil {
				return err
			}
			if _, _, err := pc.recv(soon()); err != nil {
				return err
			}
			if err := pc.send(marshalAck(""), nil, soon()); err != nil {
				return err
			}
			return pc.send(marshalAck(""), nil, soon())
		},
	}
	for name, misbehave := range bad {
		pc := rawConn(t, path)
		if err := misbehave(pc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !dropped(pc) {
			t.Errorf("%s: connection not dropped", name)
		}
	}
	// The server still serves a well-behaved proxy afterwards.
	_, ch := proxy(t, path)
	if ev := next(t, ch); ev.Kind != KindSnapshotSent {
		t.Fatalf("good proxy after bad ones got %+v", ev)
	}
	testutil.Eventually(t, "good proxy connected", func() bool { return s.Connected() == 1 })
}

func TestServerDropsProxyThatDoesNotAck(t *testing.T) {
	t.Parallel()
	s, path, _ := startServer(t, WithTimeout(200*time.Millisecond))
	pc := rawConn(t, path)
	if err := pc.send(marshalHello(), nil, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// Never ack the SnapshotSent.
	if !dropped(pc) {
		t.Fatal("silent proxy not dropped")
	}
	testutil.Eventually(t, "silent proxy unregistered", func() bool { return s.Connected() == 0 })
	if err := s.AddWorkload(context.Background(), Workload{UID: "x", Netns: ownNetns(t)}); !errors.Is(err, ErrNoProxy) {
		t.Fatalf("AddWorkload after drop: %v, want ErrNoProxy", err)
	}
}

func TestClientRejectsFdOnNonAdd(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "zdsc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "z.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		pc := packetConn{c: c}
		pc.recv(time.Now().Add(5 * time.Second)) // hello
		f, _ := os.Open("/proc/self/ns/net")
		defer f.Close()
		pc.send(marshalRequest(request{kind: KindDel, uid: "u"}), f, time.Now().Add(5*time.Second))
		pc.send(marshalRequest(request{kind: KindAdd, uid: "v"}), nil, time.Now().Add(5*time.Second))
		time.Sleep(time.Second)
	}()
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Recv(ctx); !errors.Is(err, errUnexpectedFD) {
		t.Errorf("DelWorkload with fd: err = %v, want errUnexpectedFD", err)
	}
	if _, err := c.Recv(ctx); err == nil || !strings.Contains(err.Error(), "0 netns fds") {
		t.Errorf("AddWorkload without fd: err = %v", err)
	}
}

// TestPeersOfOtherUsersAreRefused: the server reads the connecting
// process's credentials (SO_PEERCRED); a peer whose uid is not allowed gets
// no snapshot and is not counted as a proxy. Here the allowed uid is one the
// test does not run as, so the test's own connection stands for another
// user's; a real second user would also need write access to the socket,
// which Run makes owner-only.
func TestPeersOfOtherUsersAreRefused(t *testing.T) {
	t.Parallel()
	s, path, _ := startServer(t, func(s *Server) { s.peerUIDs = []uint32{uint32(os.Getuid()) + 4242} })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The server closes a refused peer at once: the hello may already meet
	// a closed socket (EPIPE), else the first read ends.
	c, err := Dial(ctx, path)
	switch {
	case err == nil:
		defer c.Close()
		if ev, err := c.Recv(ctx); err == nil {
			t.Fatalf("a peer of another uid received %s", ev.Kind)
		}
	case !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET):
		t.Fatalf("dial: %v, want a connection the server closes", err)
	}
	if n := s.Connected(); n != 0 {
		t.Errorf("%d proxies connected, want 0", n)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}
