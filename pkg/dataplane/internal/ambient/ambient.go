// Package ambient holds what the dataplane's pieces must agree on: the
// defaults they share (defaults.go), and between the CNI plugin,
// install-cni and the node agent the plugin's config entry and the
// plugin→agent add request.
// One definition keeps them from drifting; names and shapes follow upstream
// istio-cni so the pieces stay swappable. It has no Kubernetes imports, so
// install-cni stays quick to build and to fuzz.
package ambient

import "net"

// AddPath is the node agent's endpoint for CNI ADD, as upstream's. The
// defaults the pieces share (the plugin type, the agent's socket, the
// excluded namespaces) are in defaults.go; package dataplane re-exports
// them, so that meshctl's commands can reach them too.
const AddPath = "/cmdadd"

// PluginConfig is the plugin's entry in the CNI conflist, beyond the
// standard fields.
type PluginConfig struct {
	// AgentSocket is the node agent's unix socket for add requests.
	AgentSocket string `json:"agent_socket,omitempty"`
	// ExcludeNamespaces pass straight through without asking anyone.
	ExcludeNamespaces []string `json:"exclude_namespaces,omitempty"`
	Kubernetes        struct {
		// Kubeconfig lets the plugin look up the pod and its namespace.
		Kubeconfig string `json:"kubeconfig,omitempty"`
	} `json:"kubernetes"`
}

// AddEvent is what the plugin POSTs to the agent on CNI ADD. The field names
// are upstream's CNIPluginAddEvent, so either side can be swapped.
type AddEvent struct {
	Netns        string
	PodName      string
	PodNamespace string
	IPs          []IPConfig
}

// IPConfig is one pod address from the previous plugin's result.
type IPConfig struct {
	Interface *int
	Address   net.IPNet
	Gateway   net.IP
}
