package check

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestProbeCommand runs the probe as a pod runs it, with busybox's sh and
// nc, against loopback servers of both kinds it meets: one that answers on
// connect (the check's server) and an HTTP server (meshtest's echo); and
// against a closed port, which must fail.
func TestProbeCommand(t *testing.T) {
	t.Parallel()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox on this machine: the probe is busybox's sh and nc")
	}
	bin := t.TempDir()
	if err := os.Symlink(busybox, filepath.Join(bin, "nc")); err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) (string, error) {
		c := exec.Command(busybox, "sh", "-c", cmd)
		c.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := c.Output()
		return string(out), err
	}

	onConnect, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer onConnect.Close()
	go func() {
		for {
			c, err := onConnect.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s c1\n", answer)
			c.Close()
		}
	}()
	port := onConnect.Addr().(*net.TCPAddr).Port
	if out, err := run(ProbeCommand("127.0.0.1", port, 5, "")); err != nil || out != answer+" c1\n" {
		t.Errorf("server that answers on connect: %q, %v", out, err)
	}

	got := make(chan string, 1)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.Path + " " + r.Proto
		fmt.Fprint(w, "meshtest-echo cluster=c1")
	}))
	defer web.Close()
	host, p, _ := net.SplitHostPort(web.Listener.Addr().String())
	port, _ = strconv.Atoi(p)
	out, err := run(ProbeCommand(host, port, 5, HTTPRequest))
	if err != nil || !strings.HasPrefix(out, "HTTP/1.0 200 OK") || !strings.HasSuffix(out, "meshtest-echo cluster=c1") {
		t.Errorf("HTTP server: %q, %v", out, err)
	}
	select {
	case req := <-got:
		if req != "GET / HTTP/1.0" {
			t.Errorf("the HTTP server saw %q, want GET / HTTP/1.0", req)
		}
	default:
		t.Error("the HTTP server saw no request")
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	if out, err := run(ProbeCommand("127.0.0.1", port, 5, HTTPRequest)); err == nil {
		t.Errorf("a closed port answered %q", out)
	}
}
