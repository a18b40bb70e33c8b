// Package install installs the mesh into an environment's clusters. Its
// parts are subpackages, one public type each: values renders every
// cluster's Helm values (meshNetworks, multiCluster), meshca creates the
// environment's shared root CA and per-cluster intermediates (Istio's
// cacerts); installing meshctl's embedded charts comes later.
package install
