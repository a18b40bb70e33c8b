//go:build !unix

package cluster

// flockEnv: no flock here; the Docker lock alone serialises runs.
func flockEnv(string, LockHolder) (func(), error) { return func() {}, nil }
