// Package istiozds checks that meshctl's ZDS client (pkg/dataplane/internal/zds,
// through proxy.ZDS, the proxy's workload source) is driven by Istio's own
// istio-cni node agent (istio.io/istio/cni/pkg/nodeagent) as ztunnel is:
// hello, snapshot, AddWorkload with the pod's netns fd, KeepWorkload after
// the agent restarts, DelWorkload when the pod leaves the mesh, each acked.
//
// The agent runs in-process through its only exported entry point,
// nodeagent.NewServer, against a real kube-apiserver (internal/testenv) and in
// a network namespace of the test's own (it programs host rules and an
// ipset where it runs); pods are network namespaces the test creates, and
// CNI ADD events are posted to the agent's plugin socket as Istio's CNI
// plugin posts them. Root and the cached apiserver binaries are required.
//
//	cd bench && go test -run Interop ./istiozds
package istiozds
