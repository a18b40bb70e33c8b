// Package nodeagent is the dataplane DaemonSet's node agent, the part of
// istio-cni that runs on every node: it meshes the node's pods and tells the
// HBONE proxy about them.
//
// A pod enters the mesh when the CNI plugin asks (at sandbox creation, so the
// pod never runs a moment unmeshed): the agent applies the in-pod
// redirection in the pod's netns and hands the netns to the proxy over ZDS,
// answering the plugin only when both are done. It leaves when the pod
// informer sees it deleted, finished, or no longer enrolled.
//
// The agent remembers each meshed pod's netns path in a small state file on
// the host. After its own restart it reopens those paths, reapplies the rules
// (an atomic replace, so running pods never lose redirection) and only then
// accepts the proxy, whose snapshot therefore lists every pod: Add where the
// netns is still there, Keep where it cannot be reopened, so the proxy keeps
// serving what it already has. A proxy restart needs nothing special: every
// new ZDS connection gets the full snapshot.
package nodeagent
