package app

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/version"
)

// versionOptions are version's flags.
type versionOptions struct {
	Output string
}

func newVersionCommand(g *globals) *cobra.Command {
	o := &versionOptions{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print meshctl's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := struct {
				Version string `json:"version"`
				Go      string `json:"go"`
				OS      string `json:"os"`
				Arch    string `json:"arch"`
			}{version.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH}
			return print(g.streams.Out, o.Output, v, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "meshctl %s (%s, %s/%s)\n", v.Version, v.Go, v.OS, v.Arch)
				return err
			})
		},
	}
	addOutputFlag(flags{cmd.Flags()}, &o.Output)
	return cmd
}
