// Package certs is the public face of meshctl's workload certificate
// manager, for programs outside meshctl: bench's interop tests, a module of
// their own, run it against Istio's CA server (through certs/istioca) and
// can only import public packages. A Manager keeps a key and certificate
// per identity, obtained through a fetcher and refreshed at half their
// life.
//
// The implementation is pkg/dataplane/internal/certs, which meshctl's own
// packages import directly; this package re-exports only what such a
// program uses.
package certs
