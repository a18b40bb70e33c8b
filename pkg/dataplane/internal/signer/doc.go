// Package signer is the cluster side of workload certificates: a controller
// that approves and signs certificates.k8s.io/v1 CSRs addressed to meshctl's
// signerName with the cluster intermediate (Istio's cacerts).
//
// Its one rule is that only the proxy of a pod's own node may obtain that
// pod's identity. The requesting user must be the node proxy's service
// account, its token must be bound to a node (the API server records
// authentication.kubernetes.io/node-name in the CSR's extra), the named pod
// must exist with the claimed UID on that node, and the requested SPIFFE
// identity must be the pod's own namespace and service account. The rule is
// checked when approving and again when signing, so an approval by someone
// else cannot bypass it.
package signer
