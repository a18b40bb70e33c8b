package hbone

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/http2"

	"github.com/meshctl/meshctl/pkg/dataplane/hbone/internal/h2tun"
)

// serveTunnels runs the h2 side of one inbound connection with h2tun.
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
		CountError:        func(kind string) { s.cfg.metrics.h2Errors.WithLabelValues(kind).Inc() },
		Batch:             bc,
	}
	deadline := time.Now().Add(s.cfg.handshakeTimeout)
	_ = h2tun.Serve(c, cfg, deadline, func(st *h2tun.Stream, req *h2tun.Request) {
		defer st.Close()
		s.serveTunnel(ctx, info, st, req)
	})
}

func (s *Server) serveTunnel(ctx context.Context, info *connInfo, st *h2tun.Stream, req *h2tun.Request) {
	size := req.HeaderBytes
	if req.Truncated {
		size = max(size, s.cfg.maxHeaderBytes+1)
	}
	dst, code, reason := s.admit(info, req.Method, req.Authority, size)
	if code != 0 {
		s.rejectStream(st, code, reason)
		return
	}
	up, code, reason := s.openUpstream(ctx, info, dst)
	if code != 0 {
		s.rejectStream(st, code, reason)
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
		err, _ := splice(up, st, nil, received)
		if errors.Is(err, io.EOF) {
			closeWrite(up)
			return
		}
		reset(up)
	}()
	// Destination → client, from this goroutine straight into DATA frames.
	// A FIN from the destination becomes END_STREAM and the client may go
	// on sending: the stream lives until both directions have ended.
	err, writeFailed := splice(st, up, nil, s.cfg.metrics.sent.WithLabelValues("inbound"))
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

func (s *Server) rejectStream(st *h2tun.Stream, code int, reason string) {
	s.cfg.metrics.rejects.WithLabelValues(strconv.Itoa(code), reason).Inc()
	_ = st.WriteHeader(code, true)
}
