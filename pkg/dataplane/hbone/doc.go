// Package hbone is the public face of meshctl's HBONE tunnel, for programs
// outside meshctl: bench's interop tests, a module of their own, check it
// against Istio's Go HBONE peer and can only import public packages. A
// Dialer opens tunnels and the server NewServer returns terminates them,
// wire-compatible with Istio ambient's ztunnel.
//
// The implementation is pkg/dataplane/internal/hbone, which meshctl's own
// packages import directly; this package re-exports only what such a
// program uses, so that what only meshctl's proxy sets (double HBONE,
// socket marks, metrics, policy, relays, upstream dialing) can change with
// it.
package hbone
