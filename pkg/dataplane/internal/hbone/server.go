package hbone

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/hbone/internal/h2tun"
)

// Server is the inbound side of HBONE (port 15008): it terminates mutual TLS,
// accepts one CONNECT stream per tunnelled connection and splices it to the
// destination.
type Server struct {
	cfg config
	tls *tls.Config
	lim *limiter
	wg  sync.WaitGroup
}

// NewServer returns a Server; WithServerCertificates and WithRoots are required.
func NewServer(opts ...Option) (*Server, error) {
	cfg := newConfig(opts)
	if cfg.certForIP == nil || cfg.roots == nil {
		return nil, errors.New("hbone server: WithServerCertificates and WithRoots are required")
	}
	s := &Server{cfg: cfg, lim: newLimiter(cfg.limits)}
	s.tls = &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{"h2"},
		ClientAuth: tls.RequireAnyClientCert,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			dst := addrPortOf(hello.Conn.LocalAddr()).Addr()
			c, err := cfg.certForIP(hello.Context(), dst)
			if err != nil {
				return nil, fmt.Errorf("%w: certificate for %s: %w", errNoServerCert, dst, err)
			}
			return c, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if _, err := identity.Verify(rawCerts(cs.PeerCertificates), cfg.roots(), cfg.trustDomain, identity.Identity{}, cfg.now()); err != nil {
				return fmt.Errorf("%w: %w", errPeerRejected, err)
			}
			return nil
		},
	}
	return s, nil
}

var (
	errPeerRejected = errors.New("peer certificate rejected")
	errNoServerCert = errors.New("no server certificate")
)

// Serve accepts connections on ln until ln is closed or ctx ends, and then
// waits for the connections it accepted to finish.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	defer s.wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("hbone accept: %w", err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.ServeConn(ctx, c)
		}()
	}
}

type connInfo struct {
	peer     identity.Identity
	src, dst netip.AddrPort
}

// ServeConn runs one inbound HBONE connection to completion.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	// Ending ctx (the workload went away) ends its connections too.
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	src := addrPortOf(c.RemoteAddr())
	if !s.lim.connsBySrc.acquire(src.Addr()) {
		s.limited("conns_per_source", "src", src)
		return
	}
	defer s.lim.connsBySrc.release(src.Addr())
	bc := newBatchConn(c)
	tc := tls.Server(bc, s.tls)
	hsCtx, cancel := context.WithTimeout(ctx, s.cfg.handshakeTimeout)
	err := tc.HandshakeContext(hsCtx)
	cancel()
	if err != nil {
		reason := s.handshakeFailure(c, err)
		s.cfg.metrics.handshake.WithLabelValues("inbound", reason).Inc()
		s.cfg.log.Debug("hbone handshake failed", "src", c.RemoteAddr(), "reason", reason, "err", err)
		return
	}
	cs := tc.ConnectionState()
	if cs.NegotiatedProtocol != "h2" {
		s.cfg.metrics.handshake.WithLabelValues("inbound", "alpn").Inc()
		return
	}
	peer, err := identity.FromCertificate(cs.PeerCertificates[0])
	if err != nil { // VerifyConnection already checked; this cannot happen
		s.cfg.metrics.handshake.WithLabelValues("inbound", "bad_certificate").Inc()
		return
	}
	if !s.lim.connsByID.acquire(peer) {
		s.limited("conns_per_identity", "peer", peer.String())
		return
	}
	defer s.lim.connsByID.release(peer)
	info := &connInfo{peer: peer, src: src, dst: addrPortOf(c.LocalAddr())}
	s.serveTunnels(ctx, tc, bc, info)
}

// limited counts a connection or request refused by a limit.
func (s *Server) limited(limit string, args ...any) {
	s.cfg.metrics.limited.WithLabelValues(limit).Inc()
	s.cfg.log.Debug("hbone inbound limit reached", append([]any{"limit", limit}, args...)...)
}

// handshakeFailure classifies a failed handshake for the metric and answers a
// plaintext HTTP client the way net/http does, so someone who curls :15008
// sees why instead of a bare reset.
func (s *Server) handshakeFailure(c net.Conn, err error) string {
	var rhe tls.RecordHeaderError
	switch {
	case errors.As(err, &rhe):
		if rhe.Conn != nil {
			_, _ = io.WriteString(rhe.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		}
		return "plaintext"
	case errors.Is(err, errPeerRejected):
		return "bad_certificate"
	case errors.Is(err, errNoServerCert):
		return "no_certificate"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "tls"
	}
}

// admit checks a request as ztunnel does; code is 0 when it may proceed.
// The destination is dst, or for a host-name authority (gateways, and
// tunnels they forward) host, resolved by target.
func (s *Server) admit(info *connInfo, req *h2tun.Request) (dst netip.AddrPort, host hostAuthority, code int, reason string) {
	headerBytes := req.HeaderBytes
	if req.Truncated {
		headerBytes = max(headerBytes, s.cfg.maxHeaderBytes+1)
	}
	if req.Method != http.MethodConnect {
		return dst, host, http.StatusBadRequest, "method"
	}
	if s.cfg.relay != nil || s.cfg.hostTarget != nil {
		if h, err := parseHostAuthority(req.Authority); err == nil {
			if headerBytes > s.cfg.maxHeaderBytes {
				return dst, h, http.StatusRequestHeaderFieldsTooLarge, "headers_too_large"
			}
			return dst, h, 0, ""
		}
		if s.cfg.relay != nil {
			return dst, host, http.StatusBadRequest, "authority"
		}
	}
	dst, err := parseAuthority(req.Authority)
	switch {
	case err != nil:
		return dst, host, http.StatusBadRequest, "authority"
	case dst.Addr() != info.dst.Addr():
		// A tunnel may only reach the workload it was addressed to; otherwise
		// 15008 would be an open relay into the pod's network namespace.
		return dst, host, http.StatusBadRequest, "destination_mismatch"
	case dst.Addr().IsLoopback() && !s.cfg.allowLoopback:
		return dst, host, http.StatusBadRequest, "loopback"
	case ambient.IsProxyPort(dst.Port()):
		return dst, host, http.StatusBadRequest, "self_call"
	case headerBytes > s.cfg.maxHeaderBytes:
		return dst, host, http.StatusRequestHeaderFieldsTooLarge, "headers_too_large"
	}
	return dst, host, 0, ""
}

// target resolves a host-name authority: the next hop for a gateway, the
// service's target port on the connection's destination otherwise.
func (s *Server) target(info *connInfo, h hostAuthority) (netip.AddrPort, int, string) {
	if s.cfg.relay != nil {
		dst, ok := s.cfg.relay(h.host, h.port)
		if !ok {
			return dst, http.StatusServiceUnavailable, "no_endpoint"
		}
		return dst, 0, ""
	}
	dst, ok := s.cfg.hostTarget(h.host, h.port, info.dst.Addr())
	switch {
	case !ok:
		return dst, http.StatusServiceUnavailable, "unknown_host"
	case dst.Addr() != info.dst.Addr():
		return dst, http.StatusBadRequest, "destination_mismatch"
	case dst.Addr().IsLoopback() && !s.cfg.allowLoopback:
		return dst, http.StatusBadRequest, "loopback"
	case ambient.IsProxyPort(dst.Port()):
		return dst, http.StatusServiceUnavailable, "self_call"
	}
	return dst, 0, ""
}

// openUpstream applies the policy and connects to the destination; code is
// 0 on success.
func (s *Server) openUpstream(ctx context.Context, info *connInfo, dst netip.AddrPort) (up net.Conn, code int, reason string) {
	src := info.src
	if s.cfg.authorize != nil {
		if err := s.cfg.authorize(ctx, info.peer, src, dst); err != nil {
			s.cfg.log.Info("hbone inbound denied", "peer", info.peer.String(), "dst", dst, "err", err)
			return nil, http.StatusUnauthorized, "denied"
		}
	}
	dialCtx, cancel := context.WithTimeout(ctx, s.cfg.upstreamTimeout)
	defer cancel()
	release, ok := s.lim.acquireDial(dialCtx)
	if !ok {
		s.limited("upstream_dials", "dst", dst)
		return nil, http.StatusServiceUnavailable, "upstream_busy"
	}
	defer release()
	var err error
	if s.cfg.upstreamDial != nil {
		up, err = s.cfg.upstreamDial(dialCtx, src.Addr(), dst)
	} else {
		up, err = s.cfg.dial(dialCtx, "tcp", dst.String())
	}
	if err != nil {
		s.cfg.log.Debug("hbone upstream dial failed", "dst", dst, "err", err)
		return nil, http.StatusServiceUnavailable, "upstream"
	}
	return up, 0, ""
}

// serveTunnels runs the h2 side of one inbound connection: one goroutine per
// CONNECT stream, each splicing its stream to the destination.
func (s *Server) serveTunnels(ctx context.Context, c net.Conn, bc *batchConn, info *connInfo) {
	cfg := h2tun.Config{
		StreamWindow:         defaultStreamWindow,
		ConnWindow:           defaultConnWindow,
		MaxReadFrameSize:     defaultMaxReadFrameSize,
		MaxConcurrentStreams: defaultServerMaxStreamsConn,
		// Header lists up to 4× the limit are decoded so that the handler
		// can answer 431 and count it; beyond that h2tun (x/net's framer)
		// stops decoding and ends the connection.
		MaxHeaderListSize: uint32(4 * s.cfg.maxHeaderBytes),
		IdleTimeout:       s.cfg.idleTimeout,
		StallTimeout:      s.cfg.limits.StallTimeout,
		// h2tun refuses floods and malformed frames itself; this hook is the
		// only place they become visible, so count them.
		CountError: func(kind string) { s.cfg.metrics.h2Errors.WithLabelValues(kind).Inc() },
		// Requests ztunnel would refuse are answered on h2tun's read loop,
		// before it reads the peer's next frame: see h2tun.Config.Admit.
		Admit: func(req *h2tun.Request) int {
			_, _, code, reason := s.admit(info, req)
			if code != 0 {
				s.cfg.metrics.rejects.WithLabelValues(strconv.Itoa(code), reason).Inc()
			}
			return code
		},
		Batch: bc,
	}
	deadline := time.Now().Add(s.cfg.handshakeTimeout)
	_ = h2tun.Serve(c, cfg, deadline, func(st *h2tun.Stream, req *h2tun.Request) {
		defer st.Close()
		s.serveTunnel(ctx, info, st, req)
	})
}

// serveTunnel handles one CONNECT stream.
func (s *Server) serveTunnel(ctx context.Context, info *connInfo, st *h2tun.Stream, req *h2tun.Request) {
	// Admit already let this request through; this gives its destination.
	dst, host, code, reason := s.admit(info, req)
	if code == 0 && host.host != "" {
		dst, code, reason = s.target(info, host)
	}
	if code != 0 {
		s.reject(st, code, reason)
		return
	}
	release := s.tunnelSlot(info, st)
	if release == nil {
		return
	}
	defer release()
	up, code, reason := s.openUpstream(ctx, info, dst)
	if code != 0 {
		s.reject(st, code, reason)
		return
	}
	defer up.Close()
	if err := st.WriteHeader(http.StatusOK, false); err != nil {
		return
	}
	s.cfg.metrics.opened.WithLabelValues("inbound").Inc()
	defer s.cfg.metrics.closed.WithLabelValues("inbound").Inc()

	// Client → destination: END_STREAM becomes a FIN, a reset an RST.
	received := s.cfg.metrics.received.WithLabelValues("inbound")
	if !s.cfg.noInline {
		setSink(st, up, received)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err, _ := splice(withStall(up, s.cfg.limits.StallTimeout), st, received)
		if errors.Is(err, io.EOF) {
			closeWrite(up)
			return
		}
		reset(up)
	}()
	// Destination → client, from this goroutine straight into DATA frames.
	// A FIN from the destination becomes END_STREAM and the client may go
	// on sending: the stream lives until both directions have ended.
	err, writeFailed := splice(st, up, s.cfg.metrics.sent.WithLabelValues("inbound"))
	switch {
	case writeFailed: // the client reset the stream or the connection died
		reset(up)
	case errors.Is(err, io.EOF):
		_ = st.CloseWrite()
	default: // the destination reset: RFC 9113 8.5's CONNECT_ERROR
		st.Reset(http2.ErrCodeConnect)
		reset(up)
	}
	<-done
}

// tunnelSlot takes a tunnel slot for the connection's peer and source, or
// answers 429 and returns nil. It is a function of its own so that its
// locals stay off serveTunnel's frame: that frame is at the bottom of the
// tunnel goroutine's stack, whose size every idle tunnel keeps (inline, it
// took the stack past a doubling, 6 KiB more per tunnel).
func (s *Server) tunnelSlot(info *connInfo, st *h2tun.Stream) (release func()) {
	release, limit := s.lim.acquireTunnel(info.peer, info.src.Addr())
	if limit != "" {
		s.limited(limit, "peer", info.peer.String(), "src", info.src)
		s.reject(st, http.StatusTooManyRequests, limit)
		return nil
	}
	return release
}

func (s *Server) reject(st *h2tun.Stream, code int, reason string) {
	s.cfg.metrics.rejects.WithLabelValues(strconv.Itoa(code), reason).Inc()
	_ = st.WriteHeader(code, true)
}
