// Package hbone is the HBONE tunnel, wire-compatible with Istio ambient's
// ztunnel: mutual TLS 1.3 with SPIFFE certificates, ALPN h2, and one HTTP/2
// CONNECT stream per tunnelled TCP connection whose :authority is the
// original destination ip:port.
//
// Dialer is the client side (a pool of h2 connections per source identity and
// destination, 100 streams each); Server is the inbound side on port 15008,
// which picks its certificate by destination IP, checks the CONNECT request as
// ztunnel does (400 bad request, 401 denied, 503 upstream unreachable) and
// splices the stream to the destination.
//
// Known limits, both from x/net's server: a destination that half-closes
// first ends the stream (END_STREAM followed by RST_STREAM(NO_ERROR)), so
// data the client is still sending after that is dropped; and header lists
// over 4× WithMaxHeaderBytes are answered 431 by x/net before the handler
// runs, so only those between 1× and 4× are counted in the reject metric.
//
// The HTTP/2 framing is golang.org/x/net/http2's: a hand-written h2 would be a
// second, less-reviewed implementation of a protocol with a long CVE history.
package hbone
