package zds

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// A refusal's reason must reach Istio's istio-cni, which reads a response
// into 1024 bytes and decodes strings as strict proto3 UTF-8.
func TestAckTextFitsIstioCNI(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"short":               "no netns",
		"long ascii":          strings.Repeat("x", 5000),
		"long multibyte":      strings.Repeat("é", 3000),
		"invalid utf-8":       "bad \xff\xfe byte",
		"long ending invalid": strings.Repeat("a", 1017) + "\xe2\x82",
	}
	for name, in := range cases {
		out := ackText(in)
		wire := marshalAck(out)
		if len(wire) > maxAckMessage {
			t.Errorf("%s: response is %d bytes, Istio reads %d", name, len(wire), maxAckMessage)
		}
		if !utf8.ValidString(out) {
			t.Errorf("%s: ack error is not valid UTF-8: %q", name, out)
		}
		got, err := unmarshalAck(wire)
		if err != nil || got != out {
			t.Errorf("%s: round trip %q, %v", name, got, err)
		}
		if len(in) < 100 && utf8.ValidString(in) && out != in {
			t.Errorf("%s: short valid message changed to %q", name, out)
		}
	}
}

// The client applies the bound: its peer reads the ack as istio-cni does,
// into 1024 bytes, and gets all of it.
func TestClientAckFitsIstioCNIRead(t *testing.T) {
	t.Parallel()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "zds-pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	c := &Client{pc: packetConn{c: conn(fds[0])}, timeout: DefaultTimeout}
	agent := conn(fds[1])
	if err := c.Ack(errors.New(strings.Repeat("refused ", 500))); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	n, _, flags, _, err := agent.ReadMsgUnix(buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if flags&unix.MSG_TRUNC != 0 {
		t.Fatal("istio-cni would read a truncated ack")
	}
	got, err := unmarshalAck(buf[:n])
	if err != nil || !strings.HasPrefix(got, "refused refused") {
		t.Fatalf("ack error %q, %v", got, err)
	}
}
