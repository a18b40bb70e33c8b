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
// The HTTP/2 framing is golang.org/x/net/http2's: a hand-written h2 would be a
// second, less-reviewed implementation of a protocol with a long CVE history.
package hbone
