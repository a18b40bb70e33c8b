// Package values holds meshctl's default Helm values and profiles as YAML.
// The files live at the top of the repository so that people can read and
// diff them; this package exists only because go:embed can reach files in
// or below the embedding package's directory, never above it.
package values

import "embed"

// FS holds <profile>.yaml for every profile; default.yaml is the base every
// other profile is layered over.
//
//go:embed *.yaml
var FS embed.FS
