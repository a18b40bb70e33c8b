// Package cluster is meshctl's model of an environment — a set of kind
// clusters, their networks, roles and subnets — and its lifecycle: planning
// and validating a topology, rendering each cluster's kind config, creating
// the clusters in parallel through the kind Go library, the local registry,
// kubeconfigs, status and deletion.
//
// A topology entry with meta.kubeconfig names an existing (non-kind)
// cluster: it is checked and its subnets discovered before anything is
// changed (CheckExisting), recorded locally and claimed in the cluster, never
// routed, and on down only what meshctl labelled is removed from it
// (existing.go, uninstall.go).
//
// The entry point is Provider (NewProvider with options). External systems
// sit behind small interfaces declared in this package (Kind, Docker), so
// unit tests run without Docker and the e2e tier drives the same code
// against real clusters.
package cluster
