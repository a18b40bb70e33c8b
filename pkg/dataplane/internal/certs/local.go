package certs

import (
	"context"
	"time"

	"github.com/meshctl/meshctl/pkg/meshca"
)

// FromCA is a Fetcher that signs with an in-process CA: for tests,
// benchmarks and single-process setups where no Kubernetes API exists.
func FromCA(c *meshca.CA, ttl time.Duration, now func() time.Time) Fetcher {
	return fetcherFunc(func(_ context.Context, req Request) ([]byte, []byte, error) {
		t := now()
		chain, err := c.SignCSR(req.CSR, req.Identity.URL(), t.Add(-time.Minute), t.Add(ttl))
		if err != nil {
			return nil, nil, err
		}
		return meshca.EncodeCertificates(chain), c.RootsPEM(), nil
	})
}
