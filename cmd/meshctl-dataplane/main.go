// Command meshctl-dataplane is the dataplane image's binary: the entry
// points the meshctl charts' Pods run (install-cni, node-agent, proxy,
// signer) and the CNI plugin, without the CLI, kind and Helm that make up
// most of meshctl. meshctl builds the image from it when it finds it next to
// itself or on PATH; `go install github.com/meshctl/meshctl/cmd/...@latest`
// installs both.
package main

import (
	"os"
	"path/filepath"

	"github.com/meshctl/meshctl/pkg/dataplane"
)

func main() {
	// Run under the file name install-cni gives it in the host's CNI bin
	// dir, this binary is the CNI plugin.
	if filepath.Base(os.Args[0]) == dataplane.DefaultPluginType {
		dataplane.PluginMain()
		return
	}
	os.Exit(dataplane.Main(os.Args[1:], os.Stdout, os.Stderr))
}
