// Package remotesecret gives the control planes of an environment read access
// to the API servers of the other clusters, as Istio's multicluster remote
// secrets (`istioctl create-remote-secret`) do.
//
// For every cluster whose API server some control plane must read (the
// source), meshctl creates in that cluster a reader ServiceAccount
// (istio-system/meshctl-reader: not a name Istio's charts own), a ClusterRole with the rules
// of Istio's istio-reader-clusterrole bound to it, and a long-lived token
// Secret that kube-controller-manager's token controller fills. In every
// cluster that needs the source (the targets: primaries learn about every
// other cluster, so a remote's primary learns about it), meshctl writes the
// Secret istio-system/istio-remote-secret-<source>, labelled
// istio/multiCluster=true and annotated networking.istio.io/cluster=<source>,
// whose one key <source> holds a kubeconfig with the source's API server
// address on the kind network, its CA and the reader's token: the same
// object istioctl prints.
//
// Everything is idempotent: objects are named, not generated, so a re-run
// finds them, leaves what is right alone and updates what differs in place.
//
// Check reads, and writes nothing: for every secret Ensure would write, it
// compares the server the installed one names with the one Ensure would
// write now (the same plan, the same choice of server), so that status can
// say when a secret named by address went stale or is missing. Secret
// prints one secret as Ensure writes it where it is held.
package remotesecret
