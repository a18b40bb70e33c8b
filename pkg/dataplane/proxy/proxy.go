package proxy

import (
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	impl "github.com/meshctl/meshctl/pkg/dataplane/internal/proxy"
)

// Proxy is one node proxy.
type Proxy = impl.Proxy

// XDS configures the proxy's XDS source: istiod's address, how its
// certificate is verified and the proxy's token and names.
type XDS = impl.XDS

// New builds a Proxy; WithFetcher is required.
func New(opts ...impl.Option) (*Proxy, error) { return impl.New(opts...) }

// ZDS returns the workload events of a node agent listening on the ZDS
// socket at path; the proxy redials with backoff when a session ends.
func ZDS(path string) impl.WorkloadEvents { return impl.ZDS(path) }

// WithWorkloadEvents sets where pods come from (ZDS).
func WithWorkloadEvents(e impl.WorkloadEvents) impl.Option { return impl.WithWorkloadEvents(e) }

// WithFetcher sets how certificates are obtained: a value with the method
// Fetch(ctx, certs.Request) (chain, roots []byte, err error).
func WithFetcher(f certs.Fetcher) impl.Option { return impl.WithFetcher(f) }

// WithAddresses sets the admin, metrics and readiness listen addresses; an
// empty string disables that server.
func WithAddresses(admin, metrics, readiness string) impl.Option {
	return impl.WithAddresses(admin, metrics, readiness)
}

// WithXDS gives the proxy the mesh's workloads, services and authorization
// policies from istiod's XDS.
func WithXDS(x XDS) impl.Option { return impl.WithXDS(x) }
