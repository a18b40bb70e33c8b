// Command meshctl builds multi-cluster mesh test environments on kind.
package main

import (
	"os"

	"github.com/meshctl/meshctl/cmd/meshctl/app"
)

func main() {
	os.Exit(app.Main())
}
