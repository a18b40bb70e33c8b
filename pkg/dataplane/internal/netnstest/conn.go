package netnstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Listen opens a TCP listener inside ns, closed when the test ends.
func Listen(t testing.TB, ns *os.File, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := Do(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Dial connects from inside ns to dst, from src if set and with SO_MARK
// mark if non-zero, then closes the connection.
func Dial(ns *os.File, dst, src string, mark int) error {
	return Do(ns, func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		if src != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
		}
		if mark != 0 {
			d.Control = func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, mark) })
				return errors.Join(err, serr)
			}
		}
		c, err := d.Dial("tcp", dst)
		if err != nil {
			return fmt.Errorf("dial %s: %w", dst, err)
		}
		return c.Close()
	})
}
