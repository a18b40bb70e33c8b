// Package identity is the SPIFFE workload identity the HBONE dataplane speaks:
// spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>, carried in a
// critical URI SAN of an ECDSA P-256 certificate, as Istio ambient expects.
//
// It also verifies peer chains, because both ends of an HBONE tunnel must apply
// exactly the same rules (chain to the mesh root, same trust domain, one SPIFFE
// URI) and a single implementation keeps them from drifting apart.
package identity
