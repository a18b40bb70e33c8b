package cniplugin

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
)

// config is the plugin's stdin: the standard fields plus our entry's.
type config struct {
	types.PluginConf
	ambient.PluginConfig
}

// k8sArgs are the CNI_ARGS the kubelet (via the runtime) passes.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAME      types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_UID       types.UnmarshallableString //nolint:revive // CNI_ARGS key
}

// parseConfig decodes stdin. Every failure is a *types.Error, so the runtime
// gets the CNI error JSON with the right code rather than a crash.
func parseConfig(stdin []byte) (*config, error) {
	var c config
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "decoding plugin config", err.Error())
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "decoding prevResult", err.Error())
	}
	if c.AgentSocket == "" {
		c.AgentSocket = ambient.DefaultAgentSocket
	}
	if c.ExcludeNamespaces == nil {
		c.ExcludeNamespaces = ambient.DefaultExcludedNamespaces
	}
	return &c, nil
}

func parseArgs(s string) (k8sArgs, error) {
	var a k8sArgs
	if err := types.LoadArgs(s, &a); err != nil {
		return a, types.NewError(types.ErrInvalidEnvironmentVariables, "parsing CNI_ARGS", err.Error())
	}
	return a, nil
}

// output is what ADD prints: the previous result, or an empty one of the
// config's version when we are first in the chain (only in tests).
func (c *config) output() (types.Result, error) {
	if c.PrevResult != nil {
		return c.PrevResult, nil
	}
	r, err := version.NewResult(c.CNIVersion, []byte(fmt.Sprintf(`{"cniVersion":%q}`, c.CNIVersion)))
	if err != nil {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion, "building result", err.Error())
	}
	return r, nil
}
