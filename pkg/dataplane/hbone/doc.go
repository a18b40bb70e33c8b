// Package hbone is the HBONE tunnel, wire-compatible with Istio ambient's
// ztunnel: mutual TLS 1.3 with SPIFFE certificates, ALPN h2, and one HTTP/2
// CONNECT stream per tunnelled TCP connection whose :authority is the
// original destination ip:port.
//
// Dialer is the client side (a pool of h2 connections per source identity and
// destination, 100 streams each); Server is the inbound side on port 15008,
// which picks its certificate by destination IP, checks the CONNECT request as
// ztunnel does (400 bad request, 401 denied, 431 headers too large, 503
// upstream unreachable) and splices the stream to the destination. A FIN
// crosses the tunnel as END_STREAM and the other direction goes on, in both
// directions; a reset crosses as RST_STREAM.
//
// The HTTP/2 connection is internal/h2tun: x/net/http2's Framer and hpack
// for everything on the wire, with a stream state machine and flow control
// of its own, built for tunnels (one reader goroutine per connection, writes
// from the copying goroutine). It replaced x/net's general-purpose Transport
// and Server, which handed every frame across two or three goroutines; the
// h2tun package comment says what was kept from x/net and why. In the last
// side-by-side run (commit 5416e1d, 2 cores) x/net's path did 260 MB/s and
// 1 KiB round trips at p50/p99 90/162 µs, h2tun 710 MB/s (0.83× TLS alone)
// and 65/142 µs.
//
// Where a tunnel's far side is a plain TCP socket (the destination on the
// server, the application's connection in Proxy), the connection's reader
// writes arriving DATA straight to it while the copying goroutine waits
// (h2tun's Stream.SetSink): a small request or response crosses each proxy
// without a goroutine handoff, which halved p50 and cut p99 by about 45%.
// The unexported withNoInline keeps the handoff path for the benchmark's
// A/B row. README.md has the current figures against the targets.
//
// Known limit: a header list beyond 4× WithMaxHeaderBytes is not decoded at
// all; the connection gets GOAWAY (the CONTINUATION-flood defence) and the
// h2 error metric counts it, not the 431 reject metric.
package hbone
