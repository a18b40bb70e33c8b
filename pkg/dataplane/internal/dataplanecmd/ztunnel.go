package dataplanecmd

import (
	"errors"
	"flag"
	"fmt"
)

// ZtunnelArg is the argument Istio's ztunnel chart passes after "proxy"
// (its DaemonSet runs `<image> proxy ztunnel`): with it, meshctl's proxy
// stands in for ztunnel when that chart runs the dataplane image, and reads
// the settings the chart gives ztunnel in its environment (ztunnelEnv).
const ZtunnelArg = "ztunnel"

// ztunnelEnv maps the proxy's flags to the variables Istio's ztunnel chart
// sets (manifests/charts/ztunnel/templates/daemonset.yaml). They fill a flag
// neither the command line nor MESHCTL_<FLAG> set.
var ztunnelEnv = map[string]string{
	"ca-address":  "CA_ADDRESS",
	"xds-address": "XDS_ADDRESS",
	"cluster":     "ISTIO_META_CLUSTER_ID",
	"network":     "NETWORK",
}

// ztunnelShape strips ZtunnelArg from the proxy's arguments; ok says it was
// there. Every other command, and a proxy without it, is left alone.
func ztunnelShape(name string, args []string) (rest []string, ok bool) {
	if name != "proxy" || len(args) == 0 || args[0] != ZtunnelArg {
		return args, false
	}
	return args[1:], true
}

// fromZtunnelEnv sets every flag of ztunnelEnv still unset from ztunnel's
// variable, when that variable is set and not empty (the chart always sets
// NETWORK's siblings, and leaves NETWORK out when it has none).
func fromZtunnelEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	for name, key := range ztunnelEnv {
		if set[name] || fs.Lookup(name) == nil {
			continue
		}
		if v, ok := lookup(key); ok && v != "" {
			if err := fs.Set(name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", key, v, err))
			}
		}
	}
	return errors.Join(errs...)
}
