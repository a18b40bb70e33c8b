// Package install renders Helm values (meshNetworks, multiCluster), creates
// the environment's shared root CA, and installs meshctl's embedded charts.
package install
