// Package meshca keeps an environment's mesh identity: one root CA for the
// whole environment and one intermediate CA per cluster, in Istio's cacerts
// layout, so that workloads in every cluster trust each other through the
// shared root while each cluster signs with its own key.
//
//	a := meshca.New(meshca.Dir(artifacts, env), meshca.WithName(env))
//	res, err := a.Ensure("cluster1", "cluster2")   // creates, or reuses what is valid
//	certs, err := a.Cacerts("cluster1")
//	action, err := meshca.InstallSecret(ctx, clientset, certs)
//
// On disk, under <artifacts>/<env>/ca/ (directories 0700, keys 0600, every
// file written atomically):
//
//	root-cert.pem, root-key.pem
//	<cluster>/ca-cert.pem, ca-key.pem, root-cert.pem, cert-chain.pem
//
// Keys are ECDSA P-256. Files are reused on a re-run while they parse, match
// their keys, chain to the root and have more than a third of their lifetime
// left; anything else is renewed and the result says why.
//
// In the cluster, the same package signs: the signer loads the cluster's
// intermediate from the mounted cacerts Secret (LoadCA, or FromPEM) and
// issues workload certificates with it (CA.Sign, CA.SignCSR). Workload
// certificates are ECDSA P-256 with the SPIFFE URI as the only SAN and an
// empty subject, which makes the SAN extension critical (RFC 5280 4.2.1.6):
// what Istio and ztunnel issue and expect. NewTest makes a throwaway root
// and intermediate for tests and benchmarks, and NewIssuer is the one way
// meshctl makes a CA certificate (the root, the intermediates, the test
// hierarchy, internal/testenv's API server CA).
package meshca
