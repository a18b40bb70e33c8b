// Package ca is the certificate authority side of workload identity: a cluster
// intermediate (Istio's cacerts layout) that signs workload certificates, and a
// throwaway root+intermediate for tests and benchmarks.
//
// Workload certificates are ECDSA P-256 with the SPIFFE URI as the only SAN and
// an empty subject, which makes the SAN extension critical (RFC 5280 4.2.1.6) —
// what Istio and ztunnel issue and expect.
package ca
