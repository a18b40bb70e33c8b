// Package cluster is the lifecycle of a meshctl environment: it creates the
// kind clusters of a plan in parallel through the kind Go library, adopts
// existing clusters, runs the local registry, exports kubeconfigs, keeps
// meshctl's records of its clusters, reports status, locks an environment
// against concurrent runs, and deletes (or, for clusters it keeps, empties)
// them on down.
//
// What an environment is — the topology, the plan, validation, the kind
// config, the format of the records — is pkg/cluster/model, which has no
// side effects. This package acts on a *model.Plan; the parts that talk to
// the outside are internal packages, each behind one concern:
//
//   - internal/kindprovider: kind's cluster provider, and its nodes
//   - internal/docker: the docker CLI
//   - internal/registry: the local registry container and the nodes' view of it
//   - internal/records: meshctl's records, on nodes and in the artifacts directory
//   - internal/existing: existing clusters (meta.kubeconfig) — their checks,
//     discovered subnets and the claim that reserves one for an environment
//   - internal/uninstall: removing what meshctl labelled from a cluster it keeps
//
// "Existing" means one thing here: a cluster meshctl uses and did not create
// (model.ClusterPlan.Existing). A cluster that List finds — a kind cluster on
// this machine, or an existing cluster through its record — is a Listed.
//
// The entry point is Provider (NewProvider with options). Kind and Docker
// are small interfaces declared here, so unit tests run without Docker and
// the e2e tier drives the same code against real clusters.
package cluster
