// Package proxy is the public face of meshctl's node proxy, for programs
// outside meshctl: bench's interop tests, a module of their own, run it
// against Istio's discovery server (WithXDS) with pods from a ZDS node
// agent (ZDS), and can only import public packages.
//
// The implementation is pkg/dataplane/internal/proxy, which meshctl's own
// packages import directly (the image's proxy and gateway commands run it
// from there); this package re-exports only what such a program uses, so
// that what only meshctl sets (the cluster model, policies, mesh CIDRs,
// the east-west gateway) can change with it.
package proxy
