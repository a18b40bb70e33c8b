package ambient

// Defaults the dataplane's pieces and its commands share: one definition
// each, so that a command's flag defaults to what the library assumes when
// the option is not given. They are here, in a package that imports
// nothing, because every piece needs them and package dataplane, which
// re-exports them for code outside the dataplane, imports every piece.
const (
	// DefaultTrustDomain is the mesh's trust domain, Istio's default: the
	// domain of every SPIFFE identity.
	DefaultTrustDomain = "cluster.local"
	// DefaultDomain is the clusters' DNS domain, Kubernetes' default.
	DefaultDomain = "cluster.local"
	// DefaultSystemNamespace is Istio's system namespace: istiod, its CA
	// root and the remote secrets are there.
	DefaultSystemNamespace = "istio-system"
	// DefaultRootNamespace is Istio's root namespace (meshConfig.rootNamespace):
	// its policies apply mesh-wide.
	DefaultRootNamespace = DefaultSystemNamespace
	// DefaultPluginType is the CNI plugin's type in the conflist, which is
	// also the file name install-cni gives meshctl's binary in the host's
	// CNI bin dir: the container runtime runs a plugin by its file name.
	DefaultPluginType = "meshctl-cni"
	// DefaultAgentSocket is the host path where the node agent listens for
	// the plugin's add requests.
	DefaultAgentSocket = "/var/run/meshctl/pluginevent.sock"
)

// DefaultExcludedNamespaces never get redirection: the control plane must
// come up before the mesh does.
var DefaultExcludedNamespaces = []string{"kube-system"}
