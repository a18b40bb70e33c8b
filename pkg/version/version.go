// Package version holds meshctl's version, stamped at build time with
// -ldflags "-X github.com/meshctl/meshctl/pkg/version.Version=...".
package version

import "runtime/debug"

// Version is the release of meshctl; "dev" for unstamped builds.
var Version = "dev"

// String returns the version, falling back to the module version recorded by
// the Go toolchain when the binary was installed with `go install`.
func String() string {
	if Version != "dev" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return Version
}
