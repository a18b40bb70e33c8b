// Package hbone is the HBONE tunnel, wire-compatible with Istio ambient's
// ztunnel: mutual TLS 1.3 with SPIFFE certificates, ALPN h2, and one HTTP/2
// CONNECT stream per tunnelled TCP connection whose :authority is the
// original destination ip:port.
//
// Dialer is the client side (a pool of h2 connections per source identity and
// destination, 100 streams each; a pooled connection on which a CONNECT got
// no answer is pinged, and closed if the PING is not acked, so a peer gone
// without a FIN costs one connect timeout, not the TCP retransmission
// timeout); Server is the inbound side on port 15008,
// which picks its certificate by destination IP, checks the CONNECT request as
// ztunnel does (400 bad request, 401 denied, 431 headers too large, 503
// upstream unreachable) and splices the stream to the destination. A FIN
// crosses the tunnel as END_STREAM and the other direction goes on, in both
// directions; a reset crosses as RST_STREAM.
//
// The HTTP/2 connection is internal/h2tun: x/net/http2's Framer and hpack
// for everything on the wire, with a stream state machine and flow control
// of its own, built for tunnels (one reader goroutine per connection, writes
// from the copying goroutine; on the client, a Read waiting while nobody
// reads the connection reads it itself, which saves Dial's callers a
// wakeup per response). The h2tun package comment says what is kept
// from x/net. TestH2Spec runs h2spec's server suite against the Server.
//
// Where a tunnel's far side is a plain TCP socket (the destination on the
// server, the application's connection in Proxy), the connection's reader
// writes arriving DATA straight to it while the copying goroutine waits
// (h2tun's Stream.SetSink), so a small request or response crosses each
// proxy without a goroutine handoff; full-size frames of a burst are held
// and written to the socket together when the burst ends, one syscall per
// up to 128 KiB instead of one per frame. The unexported withNoInline keeps
// the handoff path for the benchmark's A/B row.
//
// Where a tunnel's near side is a TCP socket, the copying goroutine reads
// it with readv into a buffer that leaves room for each DATA frame's header
// (h2tun's Stream.WriteFramed), so the data goes from the socket read to
// TLS without a copy into the h2 write buffer, each frame one full TLS
// record.
//
// The server's limits (serverLimits; their defaults, which tests change
// through withLimits) bound what peers can make the Server hold: concurrent
// connections per peer identity and per source IP (closed beyond the cap),
// concurrent tunnels per identity and per source IP (429 beyond it), and
// upstream dials in progress (a CONNECT waits for a slot, then gets 503). A
// stall timeout bounds every tunnel write on both sides: a stream whose peer
// sends no window is reset, an h2 connection or socket whose peer stops
// reading is closed.
//
// Known limit: a header list beyond 4× the header limit is not decoded at
// all; the connection gets GOAWAY (the CONTINUATION-flood defence) and the
// h2 error metric counts it, not the 431 reject metric.
//
// Programs outside meshctl (bench's interop tests) use it through
// pkg/dataplane/hbone, which re-exports the part they need.
package hbone
