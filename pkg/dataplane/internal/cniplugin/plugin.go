package cniplugin

import (
	"context"
	"os"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/enroll"
)

// agentTimeout bounds the wait for the node agent (and the API lookup).
const agentTimeout = 5 * time.Second

// SupportedVersions are the CNI spec versions the plugin speaks.
var SupportedVersions = []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// Plugin implements CNI ADD, DEL and CHECK.
type Plugin struct {
	timeout time.Duration
}

// New returns a Plugin.
func New() *Plugin {
	return &Plugin{timeout: agentTimeout}
}

// Main runs the plugin as the CNI runtime invokes it (CNI_COMMAND and
// friends in the environment, config on stdin) and exits on error, as
// skel does. The meshctl binary calls it when started as meshctl-cni.
func Main() {
	if os.Getenv("CNI_COMMAND") == "DEL" {
		// Before skel, which refuses a DEL whose stdin it cannot decode
		// or whose version it does not speak: a failing DEL keeps the
		// runtime from ever freeing the sandbox, and there is nothing to
		// undo (see Del).
		return
	}
	p := New()
	skel.PluginMainFuncs(skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check},
		version.PluginSupports(SupportedVersions...), "meshctl CNI plugin (Istio ambient compatible)")
}

// Add meshes the pod if it should be, then passes the previous result on.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	conf, err := parseConfig(args.StdinData)
	if err != nil {
		return err
	}
	if err := p.add(args, conf); err != nil {
		return err
	}
	out, err := conf.output()
	if err != nil {
		return err
	}
	return types.PrintResult(out, conf.CNIVersion)
}

func (p *Plugin) add(args *skel.CmdArgs, conf *config) error {
	k, err := parseArgs(args.Args)
	if err != nil {
		return err
	}
	ns, name := string(k.K8S_POD_NAMESPACE), string(k.K8S_POD_NAME)
	if ns == "" || name == "" || slices.Contains(conf.ExcludeNamespaces, ns) {
		return nil // not a Kubernetes pod, or one we never touch
	}
	if conf.Kubernetes.Kubeconfig != "" {
		lctx, lcancel := context.WithTimeout(context.Background(), p.timeout/2)
		pod, namespace, err := lookupPod(lctx, conf.Kubernetes.Kubeconfig, ns, name)
		lcancel()
		if err == nil && !enroll.Meshed(pod, namespace, conf.ExcludeNamespaces) {
			return nil
		}
		// With the API server unreachable (or refusing) the agent decides
		// from its informer cache, which already holds the pod once it is
		// bound to this node: pods outside the mesh still start. A pod
		// neither can place fails and is retried by the kubelet, so a
		// meshed pod never starts without its redirection.
	}
	// Without a kubeconfig the agent, which watches every pod on the node,
	// makes the decision and answers at once for pods it does not mesh.
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	if err := netnsExists(args.Netns); err != nil {
		return err
	}
	ips, err := podIPs(conf.PrevResult)
	if err != nil {
		return err
	}
	ev := ambient.AddEvent{Netns: args.Netns, PodName: name, PodNamespace: ns, IPs: ips}
	if err := askAgent(ctx, conf.AgentSocket, ev, p.timeout); err != nil {
		return types.NewError(types.ErrTryAgainLater, "adding pod to the mesh", err.Error())
	}
	return nil
}

// Del is a no-op: the agent removes a pod when its informer sees it go, and
// the rules die with the netns anyway. It succeeds whatever the config, as
// a failing DEL would keep the runtime from ever freeing the sandbox.
func (p *Plugin) Del(*skel.CmdArgs) error { return nil }

// Check validates the config and that a previous plugin produced a result.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	conf, err := parseConfig(args.StdinData)
	if err != nil {
		return err
	}
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs a prevResult", "the plugin must be chained")
	}
	return nil
}
