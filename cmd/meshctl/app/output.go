package app

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// Output formats for -o.
const (
	outputText = "text"
	outputJSON = "json"
	outputYAML = "yaml"
)

// addOutputFlag binds -o (text, json or yaml) to p; the flag's parser
// refuses any other format before the command does anything.
func addOutputFlag(f flags, p *string) {
	f.outputVar(p, outputText, outputJSON, outputYAML)
}

// print writes v as JSON or YAML, or calls text for people.
func print(w io.Writer, format string, v any, text func(io.Writer) error) error {
	switch format {
	case outputJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case outputYAML:
		out, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = w.Write(out)
		return err
	default:
		return text(w)
	}
}
