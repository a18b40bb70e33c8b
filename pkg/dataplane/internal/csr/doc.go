// Package csr obtains workload certificates through the Kubernetes
// certificates.k8s.io/v1 API: the node proxy creates a CertificateSigningRequest
// with meshctl's signerName, naming the pod it asks for, and waits for the
// meshctl signer (package signer) to issue it. Going through the API server
// means the request carries the proxy's authenticated user, including the node
// its service-account token is bound to, which is what lets the signer refuse
// identities of pods on other nodes.
package csr
