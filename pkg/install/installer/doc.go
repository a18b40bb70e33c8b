// Package installer installs meshctl's embedded Helm charts (pkg/install/charts)
// into the clusters of an environment with the Helm Go SDK, every cluster in
// parallel:
//
//	in := installer.New(installer.WithTimeout(5 * time.Minute))
//	res, err := in.Install(ctx, installer.Target{Cluster: "cluster1", Kubeconfig: path, Values: v}, ...)
//	res, err := in.Uninstall(ctx, targets...)
//
// Install validates first and acts second: every cluster's values are
// checked against the charts' values.schema.json and every cluster's API
// server must answer before any cluster is touched, so bad input (a key the
// schema does not know, an unreachable cluster) changes nothing anywhere.
// Then each chart is installed, or upgraded, atomically and waited for; a
// failure rolls that cluster's release back and is reported with every other
// cluster's outcome. A release whose rendered manifest, chart and values
// are already deployed is left alone ("unchanged"): re-running install with
// nothing changed makes no new revision and touches no object.
package installer
