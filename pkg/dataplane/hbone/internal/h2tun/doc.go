// Package h2tun is a lean HTTP/2 connection that carries CONNECT tunnels and
// nothing else: the client opens streams with a CONNECT request and waits for
// the response status; the server hands each CONNECT to a handler. Both ends
// of a stream are byte pipes with END_STREAM as half-close and RST_STREAM as
// abort.
//
// Why it is hand-rolled: x/net/http2's Transport and Server are general
// purpose HTTP, and they hand every frame across two or three goroutines (a
// frame reader, a serve loop or transport loop, a body pipe, a write
// scheduler and a frame-writer goroutine). On a tunnel each hand-off is a
// scheduler round trip per 16 KiB, which made HBONE half as fast as TLS
// alone. Here a connection has one reader goroutine, which demultiplexes
// frames into per-stream receive buffers and never blocks on a write, and
// stream writes frame DATA directly from the caller's goroutine. The server's
// streams also live until both directions end, so a destination that
// half-closes first no longer drops what the client is still sending.
//
// What is still x/net's: all frame parsing and validation (http2.Framer,
// including CONTINUATION assembly with its header-list bound and the
// pseudo-header checks) and header compression (http2/hpack). What is ours:
// the stream state machine, flow control, SETTINGS/PING/GOAWAY handling and
// the flood limits (streams beyond MAX_CONCURRENT_STREAMS, rapid reset,
// queued control frames, empty DATA frames), each counted through a hook.
package h2tun
