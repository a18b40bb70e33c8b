// Package h2tun is a lean HTTP/2 connection that carries CONNECT tunnels and
// nothing else: the client opens streams with a CONNECT request and waits for
// the response status; the server hands each CONNECT to a handler. Both ends
// of a stream are byte pipes with END_STREAM as half-close and RST_STREAM as
// abort.
//
// A connection has one reader goroutine, which demultiplexes frames into
// per-stream receive buffers and never blocks on a write, and stream writes
// frame DATA directly from the caller's goroutine (x/net/http2's Transport
// and Server hand every frame across several goroutines, a scheduler round
// trip per 16 KiB on a tunnel). On a client connection, a Read or Connect
// that waits while nobody reads the connection reads and dispatches frames
// itself instead, and the reader goroutine reads whenever none does
// (leader/follower, lead.go): the caller of a small request/response gets
// its answer without a wakeup by the reader. The server's streams live until both
// directions end, so a destination that half-closes first does not drop
// what the client is still sending.
//
// What is x/net's: frame parsing and validation (http2.Framer, including
// CONTINUATION assembly with its header-list bound and the pseudo-header
// checks) and header compression (http2/hpack). What is ours: the stream
// state machine, flow control, SETTINGS/PING/GOAWAY handling, the request
// rules of RFC 9113 8 for a CONNECT server (malformed requests are reset
// with PROTOCOL_ERROR), the validation of the peer's SETTINGS (an
// out-of-range value is a connection error; frames we write are never
// smaller than 16 KiB whatever the peer says), the stall timeout, and the
// flood limits (streams beyond MAX_CONCURRENT_STREAMS, rapid reset, queued
// control frames, empty DATA frames), each counted through a hook.
package h2tun
