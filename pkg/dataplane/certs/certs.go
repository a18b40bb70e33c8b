package certs

import (
	"time"

	impl "github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
)

// Manager fetches and refreshes the certificates of the identities it tracks.
type Manager = impl.Manager

// Pod names the pod an identity is requested for.
type Pod = impl.Pod

// Request is one certificate request handed to a fetcher: the identity,
// its pod and the PEM CSR.
type Request = impl.Request

// StateAvailable is the state Manager.Dump shows for a certificate that is
// issued and valid.
const StateAvailable = impl.StateAvailable

// New returns a Manager that obtains certificates through f, any value
// with the method Fetch(ctx, Request) (chain, roots []byte, err error):
// istioca's Client, for one.
func New(f impl.Fetcher, opts ...impl.Option) *Manager { return impl.New(f, opts...) }

// WithBackoff sets the first retry delay and its cap.
func WithBackoff(initial, max time.Duration) impl.Option { return impl.WithBackoff(initial, max) }
