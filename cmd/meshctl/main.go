// Command meshctl builds multi-cluster mesh test environments on kind.
package main

import (
	"os"
	"path/filepath"

	"github.com/meshctl/meshctl/cmd/meshctl/app"
	"github.com/meshctl/meshctl/pkg/dataplane"
)

func main() {
	// Run under the file name install-cni gives it in the host's CNI bin
	// dir, the one meshctl binary is also the CNI plugin.
	if filepath.Base(os.Args[0]) == dataplane.DefaultPluginType {
		dataplane.PluginMain()
		return
	}
	os.Exit(app.Main())
}
