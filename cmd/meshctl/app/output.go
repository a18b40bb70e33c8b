package app

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Output formats for -o.
const (
	outputText = "text"
	outputJSON = "json"
	outputYAML = "yaml"
)

func addOutputFlag(cmd *cobra.Command) {
	cmd.Flags().StringP("output", "o", outputText, "output format: text, json or yaml")
}

// outputFormat validates -o before a command does anything.
func (g *globals) outputFormat() (string, error) {
	o := g.settings.GetString("output")
	switch o {
	case outputText, outputJSON, outputYAML:
		return o, nil
	}
	return "", fmt.Errorf("unknown output format %q: want text, json or yaml", o)
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
