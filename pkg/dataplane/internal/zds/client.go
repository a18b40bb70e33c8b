package zds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Event is one request from the node agent, as the proxy sees it.
type Event struct {
	Kind Kind
	UID  string       // empty for KindSnapshotSent
	Info WorkloadInfo // set for KindAdd only
	// Netns is the pod's network namespace, set for KindAdd only. The
	// receiver owns it and must close it.
	Netns *os.File
}

// Client is the proxy's end of ZDS: it dials the node agent, says hello,
// then receives Events and must Ack each one before the next arrives.
type Client struct {
	pc      packetConn
	timeout time.Duration
}

// Dial connects to the node agent's socket and sends ZdsHello{V1}.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, fmt.Errorf("dialing zds socket %s: %w", path, err)
	}
	c := &Client{pc: packetConn{c: conn.(*net.UnixConn)}, timeout: DefaultTimeout}
	if err := c.pc.send(marshalHello(), nil, time.Now().Add(c.timeout)); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("sending hello: %w", err)
	}
	return c, nil
}

// Recv waits for the next request, until ctx ends. A request that breaks the
// protocol (garbage, or an fd where none belongs) is an error; the
// connection should then be closed and redialled, and the agent's snapshot
// will restore the state.
func (c *Client) Recv(ctx context.Context) (Event, error) {
	deadline, _ := ctx.Deadline()
	stop := context.AfterFunc(ctx, func() { _ = c.pc.c.SetReadDeadline(time.Now()) })
	defer stop()
	msg, fds, err := c.pc.recv(deadline)
	if err != nil {
		if ctx.Err() != nil {
			return Event{}, fmt.Errorf("receiving zds request: %w", ctx.Err())
		}
		return Event{}, fmt.Errorf("receiving zds request: %w", err)
	}
	req, err := unmarshalRequest(msg)
	if err != nil {
		closeAll(fds)
		return Event{}, fmt.Errorf("receiving zds request: %w", err)
	}
	ev := Event{Kind: req.kind, UID: req.uid}
	switch {
	case req.kind == KindAdd && len(fds) == 1:
		ev.Info, ev.Netns = req.info, fds[0]
	case req.kind == KindAdd:
		closeAll(fds)
		return Event{}, fmt.Errorf("receiving AddWorkload %s: %d netns fds, want 1", req.uid, len(fds))
	case len(fds) > 0:
		closeAll(fds)
		return Event{}, fmt.Errorf("receiving %s: %w", req.kind, errUnexpectedFD)
	}
	return ev, nil
}

// Ack answers the last request: nil accepts it, an error refuses it and the
// agent reports the message back to whoever asked for the change.
func (c *Client) Ack(err error) error {
	msg := ""
	if err != nil {
		msg = ackText(err.Error())
		if msg == "" { // an empty error string would read as success
			msg = "unknown error"
		}
	}
	if err := c.pc.send(marshalAck(msg), nil, time.Now().Add(c.timeout)); err != nil {
		return fmt.Errorf("sending ack: %w", err)
	}
	return nil
}

// Close closes the connection; the agent forgets this proxy.
func (c *Client) Close() error {
	if err := c.pc.c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("closing zds connection: %w", err)
	}
	return nil
}
