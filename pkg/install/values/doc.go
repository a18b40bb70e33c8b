// Package values renders the Helm values each cluster of a meshctl
// environment is installed with:
//
//	r, err := values.New(values.WithProfile("ambient"), values.WithFiles("my.yaml"), values.WithSet("a.b=1"))
//	out, err := r.Render(plan)            // one Cluster per planned cluster, in plan order
//
// Layers, lowest first, merged as Helm merges them: the default profile
// (profiles/default.yaml), the named profile over it, the values meshctl
// derives from the plan (global.meshID, global.multiCluster.clusterName,
// global.network, global.meshNetworks), then each values file in turn, then
// each --set expression. The user has the last word, as with `helm install`.
package values
