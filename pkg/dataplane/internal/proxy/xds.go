package proxy

import (
	"fmt"
	"log/slog"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/xds"
)

// newXDSSource builds the XDS source WithXDS asks for.
func newXDSSource(x XDS, store *policy.Store, log *slog.Logger) (*xds.Source, error) {
	info, err := xds.NodeInfoFromEnv(x.Cluster)
	if err != nil {
		return nil, fmt.Errorf("proxy: XDS node metadata: %w", err)
	}
	for _, f := range []struct {
		to *string
		v  string
	}{
		{&info.PodName, x.PodName}, {&info.Namespace, x.PodNamespace}, {&info.NodeName, x.NodeName}, {&info.IP, x.InstanceIP},
	} {
		if f.v != "" {
			*f.to = f.v
		}
	}
	node, err := info.Node()
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	src, err := xds.NewSource(xds.Config{
		Address: x.Address, ServerName: x.ServerName, Roots: x.Roots, Token: x.Token,
		ClusterID: x.Cluster, Node: node, DialOptions: x.DialOptions, Log: log,
	}, store, x.Cluster)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return src, nil
}
