package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshctl/meshctl/pkg/dataplane/certs/istioca"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/rawgrpc"
)

// Backoff between connection attempts, as ztunnel's ADS client.
const (
	InitialBackoff = 10 * time.Millisecond
	MaxBackoff     = 15 * time.Second
)

// channelMaxBackoff caps the gRPC channel's own reconnect backoff
// (500 ms × 1.6, jittered), whatever MaxBackoff, Run's: after a failure to
// connect Run retries as soon as the channel is Ready again, so the
// channel's next attempt is when a restarted istiod is found. Capped at
// 15 s the attempts fall ≈0.5, 1.3, 2.6, 4.6, 7.9, 13.1, 21 s after istiod
// went away, and an istiod back after 8 s is found 5 s later; capped at 4 s
// it is found within 4 s, for a refused connection every 4 s while istiod
// is away. A smaller Config.MaxBackoff (tests) still applies.
const channelMaxBackoff = 4 * time.Second

// maxMessage is ztunnel's max_decoding_message_size: a full WDS push of a
// large mesh is one message.
const maxMessage = 200 << 20

// Config describes how to reach istiod's XDS server.
type Config struct {
	// Address is istiod's gRPC address, e.g. istiod.istio-system.svc:15012.
	Address string
	// ServerName is the name istiod's serving certificate is verified
	// against; empty means Address's host.
	ServerName string
	// Roots returns the PEM mesh roots istiod's certificate must chain to,
	// read on every handshake.
	Roots func() ([]byte, error)
	// Token returns the service-account token sent as the bearer token,
	// read on every connection.
	Token func() (string, error)
	// ClusterID is sent as the clusterid header: istiod authenticates the
	// token against that cluster.
	ClusterID string
	// Node is the node identity and metadata (NodeInfo.Node).
	Node Node
	// Types are the resource types subscribed to, in order.
	Types []string
	// InitialBackoff and MaxBackoff bound the wait between connection
	// attempts (zero: the package's defaults).
	InitialBackoff, MaxBackoff time.Duration
	// DialOptions are appended to the client's (tests).
	DialOptions []grpc.DialOption
	Log         *slog.Logger
}

// Handler applies one response; the resources it refuses are NACKed.
type Handler interface {
	Handle(typeURL string, resources []Resource, removed []string) []Reject
}

// Stats are the client's counters.
type Stats struct {
	Connects, Responses, ACKs, NACKs uint64
}

// Client is a delta ADS client of istiod, as ztunnel's AdsClient: one
// stream subscribing to every type with a wildcard; each response is
// applied and ACKed, or NACKed with the rejected resources' names and
// reasons; on reconnect it sends the versions it holds
// (initial_resource_versions) so istiod sends only what changed and what
// was removed meanwhile.
type Client struct {
	cfg     Config
	conn    *grpc.ClientConn
	handler Handler
	// synced is called once, when every type's first response was ACKed.
	synced func()

	// known: per type, resource name → version held.
	known map[string]map[string]string

	connects, responses, acks, nacks atomic.Uint64
}

// NewClient returns a Client that feeds h; it connects on Run.
func NewClient(cfg Config, h Handler, synced func()) (*Client, error) {
	if cfg.Address == "" {
		return nil, errors.New("istiod XDS address is empty")
	}
	if cfg.Roots == nil {
		return nil, errors.New("istiod XDS: no mesh root source to verify istiod with")
	}
	if cfg.Token == nil {
		return nil, errors.New("istiod XDS: no service-account token source")
	}
	if len(cfg.Types) == 0 {
		return nil, errors.New("istiod XDS: no resource types to subscribe to")
	}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(cfg.Address)
		if err != nil {
			return nil, fmt.Errorf("istiod XDS address %q: %w", cfg.Address, err)
		}
		cfg.ServerName = host
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = InitialBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = MaxBackoff
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if synced == nil {
		synced = func() {}
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(istioca.TransportCredentials(cfg.ServerName, cfg.Roots)),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawgrpc.Codec{}), grpc.MaxCallRecvMsgSize(maxMessage)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2,
				MaxDelay: min(cfg.MaxBackoff, channelMaxBackoff)},
			MinConnectTimeout: 20 * time.Second,
		}),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Address, opts...)
	if err != nil {
		return nil, fmt.Errorf("istiod XDS client for %s: %w", cfg.Address, err)
	}
	return &Client{cfg: cfg, conn: conn, handler: h, synced: synced, known: map[string]map[string]string{}}, nil
}

// Close closes the connection to istiod.
func (c *Client) Close() error { return c.conn.Close() }

// Stats returns the counters.
func (c *Client) Stats() Stats {
	return Stats{Connects: c.connects.Load(), Responses: c.responses.Load(), ACKs: c.acks.Load(), NACKs: c.nacks.Load()}
}

// Run keeps a stream to istiod until ctx ends, reconnecting with backoff;
// after a failure to connect, as soon as the connection to istiod is Ready
// again.
func (c *Client) Run(ctx context.Context) error {
	pending := map[string]bool{}
	for _, t := range c.cfg.Types {
		pending[t] = true
	}
	wait := c.cfg.InitialBackoff
	for {
		// The channel's state from before the attempt: one turning Ready
		// between a failed attempt and the wait still ends the wait.
		before := c.conn.GetState()
		err := c.stream(ctx, pending)
		if ctx.Err() != nil {
			return nil
		}
		wait = c.nextBackoff(err, wait)
		c.cfg.Log.Warn("XDS stream to istiod ended; reconnecting", "address", c.cfg.Address, "err", err, "retry", wait)
		var ce *connError
		if !errors.As(err, &ce) {
			sleep(ctx, wait)
		} else if c.waitUnlessReady(ctx, wait, before) {
			c.cfg.Log.Info("connection to istiod is Ready again; reconnecting before the backoff ends", "address", c.cfg.Address)
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// waitUnlessReady waits d after a failure to open the stream, or less: until
// the channel turns Ready if it was not when the failed attempt began
// (from); it reports whether that ended the wait. The wait doubles while istiod is
// away, to 15 s after 10 s; the channel reconnects on its own (backoff
// capped at channelMaxBackoff), so istiod being back is noticed within one
// of its attempts rather than when the wait ends. Only that transition ends
// the wait: with a channel Ready all along (the token cannot be read) the
// stream is retried with backoff, not in a loop.
func (c *Client) waitUnlessReady(ctx context.Context, d time.Duration, from connectivity.State) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for state := from; ; {
		now := c.conn.GetState()
		if now == connectivity.Ready && state != connectivity.Ready {
			return true
		}
		if now == connectivity.Idle {
			// An idle channel (its connection lost, or the attempt failed
			// before asking for one) waits for a stream to connect.
			c.conn.Connect()
		}
		state = now
		if !c.conn.WaitForStateChange(ctx, state) {
			return false
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// connError is a failure to open the stream (the token, or the connection:
// a stream fails to open at once while the channel is in
// TRANSIENT_FAILURE).
type connError struct{ err error }

func (e *connError) Error() string { return "connecting: " + e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// nextBackoff is ztunnel's run_loop: a failure to connect, or a gRPC error
// other than those of a server going away, doubles the wait; a stream the
// server closed normally (MaxConnectionAge, istiod restarting) is retried
// at once.
func (c *Client) nextBackoff(err error, wait time.Duration) time.Duration {
	var ce *connError
	if errors.As(err, &ce) {
		return min(c.cfg.MaxBackoff, 2*wait)
	}
	if err == nil || errors.Is(err, io.EOF) {
		return c.cfg.InitialBackoff
	}
	st, ok := status.FromError(err)
	if !ok {
		// A response that does not decode (tonic: an Internal status).
		return min(c.cfg.MaxBackoff, 2*wait)
	}
	switch {
	case st.Code() == codes.Unknown, st.Code() == codes.Canceled, st.Code() == codes.DeadlineExceeded,
		st.Code() == codes.Unavailable && strings.Contains(st.Message(), "transport is closing"),
		st.Code() == codes.Unavailable && strings.Contains(st.Message(), "received prior goaway"):
		return c.cfg.InitialBackoff
	}
	return min(c.cfg.MaxBackoff, 2*wait)
}

// stream runs one stream; pending holds the types whose first response
// has not been ACKed yet (across streams, as ztunnel's types_to_expect).
func (c *Client) stream(ctx context.Context, pending map[string]bool) error {
	token, err := c.cfg.Token()
	if err != nil {
		return &connError{fmt.Errorf("loading service-account token: %w", err)}
	}
	md := []string{"authorization", "Bearer " + token}
	if c.cfg.ClusterID != "" {
		md = append(md, "clusterid", c.cfg.ClusterID)
	}
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, md...))
	defer cancel()
	s, err := c.conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "DeltaAggregatedResources", ServerStreams: true, ClientStreams: true}, Method)
	if err != nil {
		return &connError{err}
	}
	c.connects.Add(1)
	for _, t := range c.cfg.Types {
		req := &deltaRequest{Node: &c.cfg.Node, TypeURL: t, InitialResourceVersions: c.known[t]}
		if err := c.send(s, req); err != nil {
			return err
		}
	}
	c.cfg.Log.Info("XDS stream to istiod established", "address", c.cfg.Address)
	for {
		var f rawgrpc.Frame
		if err := s.RecvMsg(&f); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		resp, err := unmarshalDeltaResponse(f.B)
		if err != nil {
			return err
		}
		c.responses.Add(1)
		ack := c.apply(resp)
		if err := c.send(s, ack); err != nil {
			return err
		}
		if ack.ErrorDetail == "" && pending[resp.TypeURL] {
			delete(pending, resp.TypeURL)
			if len(pending) == 0 {
				c.synced()
			}
		}
	}
}

// apply hands a response to the handler and answers it: ACK, or NACK with
// the rejects. Rejected resources are not recorded as held.
func (c *Client) apply(resp *deltaResponse) *deltaRequest {
	ack := &deltaRequest{TypeURL: resp.TypeURL, ResponseNonce: resp.Nonce}
	var rejects []Reject
	if !c.subscribed(resp.TypeURL) {
		c.cfg.Log.Error("XDS response of a type not subscribed to", "type", resp.TypeURL)
	} else {
		rejects = c.handler.Handle(resp.TypeURL, resp.Resources, resp.Removed)
	}
	rejected := map[string]bool{}
	for _, r := range rejects {
		rejected[r.Name] = true
	}
	known := c.known[resp.TypeURL]
	if known == nil {
		known = map[string]string{}
		c.known[resp.TypeURL] = known
	}
	for _, name := range resp.Removed {
		delete(known, name)
	}
	for _, r := range resp.Resources {
		if rejected[r.Name] {
			delete(known, r.Name)
		} else {
			known[r.Name] = r.Version
		}
	}
	if len(rejects) > 0 {
		ack.ErrorDetail = joinRejects(rejects)
		c.nacks.Add(1)
		c.cfg.Log.Error("NACK of istiod's XDS response", "type", resp.TypeURL, "nonce", resp.Nonce, "error", ack.ErrorDetail)
	} else {
		c.acks.Add(1)
		c.cfg.Log.Debug("ACK of istiod's XDS response", "type", resp.TypeURL, "nonce", resp.Nonce,
			"resources", len(resp.Resources), "removed", len(resp.Removed))
	}
	return ack
}

func (c *Client) subscribed(t string) bool {
	for _, s := range c.cfg.Types {
		if s == t {
			return true
		}
	}
	return false
}

func (c *Client) send(s grpc.ClientStream, r *deltaRequest) error {
	b, err := r.marshal()
	if err != nil {
		return err
	}
	if err := s.SendMsg(&rawgrpc.Frame{B: b}); err != nil {
		return fmt.Errorf("sending %s request: %w", r.TypeURL, err)
	}
	return nil
}

type atomicClient = atomic.Pointer[Client]
