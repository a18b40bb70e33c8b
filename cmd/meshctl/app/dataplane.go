package app

import (
	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/dataplane"
)

// The dataplane image runs these entry points; they are hidden because
// people never run them, the charts' Pods do. meshctl keeps them so an
// image built from meshctl itself (when no meshctl-dataplane binary is
// found) still works: flags, environment variables and logging are
// package dataplane's, exactly as in the meshctl-dataplane binary.
func newDataplaneCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "dataplane",
		Short:  "Entry points of the dataplane image (run by the meshctl charts' Pods)",
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	for _, c := range dataplane.Commands() {
		cmd.AddCommand(&cobra.Command{
			Use:   c.Name,
			Short: c.Short,
			// dataplane.Run parses the flags (--help included), with the
			// standard library's flag package.
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				return dataplane.Run(cmd.Context(), c.Name, args, g.streams.Err)
			},
		})
	}
	return cmd
}
