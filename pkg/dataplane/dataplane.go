package dataplane

import (
	"context"
	"io"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/cniplugin"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/dataplanecmd"
)

// The defaults of the dataplane's flags and options, for code outside the
// dataplane that must agree with them (their one definition is internal,
// where every piece of the dataplane can import it).
const (
	// DefaultTrustDomain is the mesh's trust domain, Istio's default: the
	// domain of every SPIFFE identity.
	DefaultTrustDomain = ambient.DefaultTrustDomain
	// DefaultDomain is the clusters' DNS domain, Kubernetes' default.
	DefaultDomain = ambient.DefaultDomain
	// DefaultSystemNamespace is Istio's system namespace: istiod, its CA
	// root and the remote secrets are there.
	DefaultSystemNamespace = ambient.DefaultSystemNamespace
	// DefaultRootNamespace is Istio's root namespace (meshConfig.rootNamespace):
	// its policies apply mesh-wide.
	DefaultRootNamespace = ambient.DefaultRootNamespace
	// DefaultPluginType is the CNI plugin's type in the conflist and the
	// file name install-cni gives the binary in the host's CNI bin dir: a
	// binary run under this name is the plugin (see PluginMain).
	DefaultPluginType = ambient.DefaultPluginType
	// DefaultAgentSocket is the host path where the node agent listens for
	// the plugin's add requests.
	DefaultAgentSocket = ambient.DefaultAgentSocket
)

// DefaultExcludedNamespaces never get redirection: the control plane must
// come up before the mesh does.
var DefaultExcludedNamespaces = ambient.DefaultExcludedNamespaces

// Command is one entry point of the dataplane image: install-cni,
// node-agent, proxy, gateway, signer.
type Command struct {
	Name  string
	Short string
}

// Commands are the dataplane's entry points, in the order usage lists them.
func Commands() []Command {
	var out []Command
	for _, c := range dataplanecmd.Commands() {
		out = append(out, Command{Name: c.Name, Short: c.Short})
	}
	return out
}

// Run runs the entry point name with its flags args until ctx is done,
// logging to stderr. Every flag can also be set as MESHCTL_<FLAG>; --help
// prints the command's flags to stderr and returns nil.
func Run(ctx context.Context, name string, args []string, stderr io.Writer) error {
	return dataplanecmd.Run(ctx, name, args, stderr)
}

// Main runs the dataplane binary with args (os.Args[1:]) until SIGINT or
// SIGTERM and returns the exit code: 0 on success, 1 on failure, 130 when
// stopped by a signal. A leading "dataplane" is skipped, so the charts'
// `dataplane proxy …` works whether the image holds meshctl-dataplane or
// the whole meshctl.
func Main(args []string, stdout, stderr io.Writer) int {
	return dataplanecmd.Main(args, stdout, stderr)
}

// PluginMain runs the CNI plugin: the CNI_* environment and the config on
// stdin, the result on stdout, as the container runtime calls it. A binary
// calls it when run under the name DefaultPluginType.
func PluginMain() {
	cniplugin.Main()
}
