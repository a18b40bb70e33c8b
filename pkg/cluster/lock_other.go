//go:build !unix

package cluster

// flockEnv: no flock here; the Docker lock alone serialises runs.
func flockEnv(string, LockHolder) (func(), error) { return func() {}, nil }

// holdNetwork and claimNetwork: no flock here; down and up of two
// environments may still race on the kind network.
func holdNetwork(string) (func(), error) { return func() {}, nil }

func claimNetwork(string) (func(), bool, error) { return func() {}, true, nil }
