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
	"sync/atomic"

	"golang.org/x/net/http2"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

// Server is the inbound side of HBONE (port 15008): it terminates mutual TLS,
// accepts one CONNECT stream per tunnelled connection and splices it to the
// destination.
type Server struct {
	cfg config
	h2  *http2.Server
	tls *tls.Config
	wg  sync.WaitGroup
}

// NewServer returns a Server; WithServerCertificates and WithRoots are required.
func NewServer(opts ...Option) (*Server, error) {
	cfg := newConfig(opts)
	if cfg.certForIP == nil || cfg.roots == nil {
		return nil, errors.New("hbone server: WithServerCertificates and WithRoots are required")
	}
	s := &Server{cfg: cfg}
	s.h2 = &http2.Server{
		MaxConcurrentStreams:         defaultServerMaxStreamsConn,
		MaxUploadBufferPerConnection: defaultConnWindow,
		MaxUploadBufferPerStream:     defaultStreamWindow,
		MaxReadFrameSize:             defaultMaxReadFrameSize,
		IdleTimeout:                  cfg.idleTimeout,
		// The h2 server refuses floods and malformed frames itself; this hook
		// is the only place they become visible, so count them.
		CountError: func(errType string) { cfg.metrics.h2Errors.WithLabelValues(errType).Inc() },
	}
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

type connInfoKey struct{}

// ServeConn runs one inbound HBONE connection to completion.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	// Ending ctx (the workload went away) ends its connections too.
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	var bc *batchConn
	tc := tls.Server(c, s.tls)
	if !s.cfg.xnetH2 {
		bc = newBatchConn(c)
		tc = tls.Server(bc, s.tls)
	}
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
	info := &connInfo{peer: peer, src: addrPortOf(c.RemoteAddr()), dst: addrPortOf(c.LocalAddr())}
	if !s.cfg.xnetH2 {
		s.serveTunnels(ctx, tc, bc, info)
		return
	}
	s.h2.ServeConn(tc, &http2.ServeConnOpts{
		Context: context.WithValue(ctx, connInfoKey{}, info),
		Handler: s,
		// x/net refuses header lists over this itself (431, before any
		// handler runs and so without a metric); the handler enforces the
		// real, smaller limit so that most oversized requests are counted.
		BaseConfig: &http.Server{MaxHeaderBytes: 4 * s.cfg.maxHeaderBytes},
	})
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

// ServeHTTP handles one CONNECT stream on the x/net path.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	info, _ := r.Context().Value(connInfoKey{}).(*connInfo)
	if info == nil {
		s.reject(w, http.StatusInternalServerError, "no_conn_info")
		return
	}
	dst, code, reason := s.admit(info, r.Method, r.Host, headerBytes(r))
	if code != 0 {
		s.reject(w, code, reason)
		return
	}
	up, code, reason := s.openUpstream(r.Context(), info, dst)
	if code != 0 {
		s.reject(w, code, reason)
		return
	}
	defer up.Close()
	s.cfg.metrics.opened.WithLabelValues("inbound").Inc()
	defer s.cfg.metrics.closed.WithLabelValues("inbound").Inc()

	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()

	// Client → destination. A clean END_STREAM becomes a FIN (half-close); a
	// stream reset becomes a TCP RST, unless the response already finished,
	// in which case body errors are just the stream going away.
	var responseDone atomic.Bool
	go func() {
		err, writeFailed := splice(up, r.Body, nil, s.cfg.metrics.received.WithLabelValues("inbound"))
		switch {
		case errors.Is(err, io.EOF):
			closeWrite(up)
		case responseDone.Load() || writeFailed:
			_ = up.Close()
		default:
			reset(up)
		}
	}()
	// Destination → client. Returning from the handler sends END_STREAM;
	// panicking with ErrAbortHandler sends RST_STREAM.
	err, writeFailed := splice(w, up, flush, s.cfg.metrics.sent.WithLabelValues("inbound"))
	responseDone.Store(true)
	// On an abort the request body is not waited for: its Read only returns
	// once the handler has returned, and the goroutine then just closes up.
	if writeFailed { // the client reset the stream or the connection died
		reset(up)
		return
	}
	if isReset(err) {
		reset(up)
		panic(http.ErrAbortHandler)
	}
}

// admit checks a request as ztunnel does; code is 0 when it may proceed.
func (s *Server) admit(info *connInfo, method, host string, headerBytes int) (dst netip.AddrPort, code int, reason string) {
	if method != http.MethodConnect {
		return dst, http.StatusBadRequest, "method"
	}
	dst, err := ParseAuthority(host)
	switch {
	case err != nil:
		return dst, http.StatusBadRequest, "authority"
	case dst.Addr() != info.dst.Addr():
		// A tunnel may only reach the workload it was addressed to; otherwise
		// 15008 would be an open relay into the pod's network namespace.
		return dst, http.StatusBadRequest, "destination_mismatch"
	case dst.Addr().IsLoopback() && !s.cfg.allowLoopback:
		return dst, http.StatusBadRequest, "loopback"
	case IsSelfCallPort(dst.Port()):
		return dst, http.StatusBadRequest, "self_call"
	case headerBytes > s.cfg.maxHeaderBytes:
		return dst, http.StatusRequestHeaderFieldsTooLarge, "headers_too_large"
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

func (s *Server) reject(w http.ResponseWriter, code int, reason string) {
	s.cfg.metrics.rejects.WithLabelValues(strconv.Itoa(code), reason).Inc()
	w.WriteHeader(code)
}

// headerBytes is the HTTP/2 header list size of r (RFC 9113 6.5.2: name +
// value + 32 per field).
func headerBytes(r *http.Request) int {
	n := len(":authority") + len(r.Host) + 32 + len(":method") + len(r.Method) + 32
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 32
		}
	}
	return n
}
