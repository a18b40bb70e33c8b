package zds

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultTimeout is the read/write deadline for one exchange, as upstream:
// a peer that does not answer within it is treated as gone.
const DefaultTimeout = 5 * time.Second

// errUnexpectedFD marks a packet that carried file descriptors where the
// protocol allows none. The fds are closed before the error is returned.
var errUnexpectedFD = errors.New("unexpected file descriptor in zds message")

// packetConn frames zds messages on a SOCK_SEQPACKET socket: the kernel keeps
// packet boundaries, so one read is one message.
type packetConn struct {
	c *net.UnixConn
}

// send writes one message, with fd (if any) as SCM_RIGHTS in the same packet.
func (p packetConn) send(msg []byte, fd *os.File, deadline time.Time) error {
	var oob []byte
	if fd != nil {
		oob = unix.UnixRights(int(fd.Fd()))
	}
	if err := p.c.SetWriteDeadline(deadline); err != nil {
		return fmt.Errorf("setting write deadline: %w", err)
	}
	n, oobn, err := p.c.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return fmt.Errorf("writing zds message: %w", err)
	}
	if n != len(msg) || oobn != len(oob) {
		return fmt.Errorf("writing zds message: short write %d/%d bytes, %d/%d oob", n, len(msg), oobn, len(oob))
	}
	return nil
}

// recv reads one message and any fds that came with it. A zero deadline
// waits forever. On error every received fd is closed, so callers never leak
// descriptors a hostile peer pushed at them.
func (p packetConn) recv(deadline time.Time) (msg []byte, fds []*os.File, err error) {
	if err := p.c.SetReadDeadline(deadline); err != nil {
		return nil, nil, fmt.Errorf("setting read deadline: %w", err)
	}
	buf := make([]byte, maxMessageSize)
	// Room for a few fds, so a peer sending more than one is seen and
	// refused rather than silently truncated.
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := p.c.ReadMsgUnix(buf, oob)
	fds, perr := parseRights(oob[:oobn])
	if errors.Is(err, io.EOF) {
		err = errPeerClosed
	}
	if err != nil {
		closeAll(fds)
		return nil, nil, fmt.Errorf("reading zds message: %w", err)
	}
	if perr != nil {
		closeAll(fds)
		return nil, nil, perr
	}
	return checkFlags(buf[:n], fds, flags)
}

func checkFlags(msg []byte, fds []*os.File, flags int) ([]byte, []*os.File, error) {
	if flags&unix.MSG_TRUNC != 0 {
		closeAll(fds)
		return nil, nil, fmt.Errorf("%w: larger than %d bytes", errMalformed, maxMessageSize)
	}
	if flags&unix.MSG_CTRUNC != 0 {
		closeAll(fds)
		return nil, nil, fmt.Errorf("%w: too many file descriptors", errUnexpectedFD)
	}
	if len(msg) == 0 && len(fds) == 0 {
		// A zero-length read on SOCK_SEQPACKET is the peer's orderly close.
		return nil, nil, fmt.Errorf("reading zds message: %w", errPeerClosed)
	}
	return msg, fds, nil
}

var errPeerClosed = errors.New("peer closed the connection")

// parseRights turns SCM_RIGHTS control messages into files that close on
// garbage collection, so no path can leak them.
func parseRights(oob []byte) ([]*os.File, error) {
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control message: %w", errMalformed, err)
	}
	var files []*os.File
	for _, c := range cmsgs {
		fds, err := unix.ParseUnixRights(&c)
		if err != nil {
			// Not SCM_RIGHTS (e.g. credentials): nothing to own.
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "zds-fd"))
		}
	}
	return files, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
