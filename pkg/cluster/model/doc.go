// Package model is meshctl's model of an environment: what the user asks
// for (Spec, read from an Istio topology file; Request), what it becomes
// once defaulted and validated (Plan, one ClusterPlan per cluster), the kind
// config each kind cluster is created from, the Istio topology entries Up
// writes, and the format of meshctl's records of a cluster (Record, Pools,
// Discovery). It is data and pure functions: it runs no program, talks to no
// Docker engine or API server (imports_test.go enforces this), so that a
// topology can be parsed, planned and checked anywhere. Creating, finding
// and deleting clusters is pkg/cluster's.
//
// Two kinds of cluster share a ClusterPlan: a kind cluster meshctl creates,
// and an existing cluster (ClusterPlan.Existing, a topology entry with
// meta.kubeconfig) that meshctl uses as it is.
package model
