// Package app is meshctl's command tree; it alone chooses exit codes.
package app

import (
	"fmt"
	"os"

	"github.com/meshctl/meshctl/pkg/version"
)

// Main runs meshctl and returns the process exit code.
func Main() int {
	fmt.Fprintln(os.Stdout, version.String())
	return 0
}
