// Package certs keeps the workload certificates of one node proxy: a key and
// CSR per identity, a Fetcher that turns the CSR into a chain (Kubernetes CSRs
// signed by meshctl's signer by default, istiod's CA as ztunnel uses it with
// pkg/dataplane/certs/istioca, a local CA in tests), refresh at half the
// lifetime, and backoff from 500 ms doubling to 150 s on failure while the
// old certificate is served for as long as it is valid — so a CA outage
// shorter than half a certificate's life is invisible to traffic.
//
// Time comes from a k8s.io/utils clock so refresh and backoff are tested with
// a fake clock instead of sleeps.
//
// Programs outside meshctl (bench's interop tests) use it through
// pkg/dataplane/certs, which re-exports the part they need.
package certs
