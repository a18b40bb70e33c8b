// Package install installs the mesh into an environment's clusters. Its
// parts are subpackages, one public type each: values renders every
// cluster's Helm values (meshNetworks, multiCluster), meshca creates the
// environment's shared root CA and per-cluster intermediates (Istio's
// cacerts), image builds the dataplane image from meshctl's own binary and
// side-loads it into the nodes, charts embeds meshctl's Helm charts and
// installer installs them into every cluster with the Helm SDK.
package install
