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
package meshca
