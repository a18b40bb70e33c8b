// Command meshctl builds multi-cluster mesh test environments on kind.
package main

import (
	"os"
	"path/filepath"

	"github.com/meshctl/meshctl/cmd/meshctl/app"
	"github.com/meshctl/meshctl/pkg/dataplane/cniplugin"
)

// cniName is the file name install-cni gives this binary in the host's CNI
// bin dir: the container runtime runs a CNI plugin by its file name, so the
// one meshctl binary is also the plugin.
const cniName = "meshctl-cni" // install-cni's default plugin type

func main() {
	if filepath.Base(os.Args[0]) == cniName {
		cniplugin.Main()
		return
	}
	os.Exit(app.Main())
}
