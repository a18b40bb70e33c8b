package app

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/install/meshca"
)

func newCACommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Create (or reuse) the environment's root CA and each cluster's intermediate",
		Long: `Create the environment's mesh identity under <artifacts>/<env>/ca/: one
root CA (root-cert.pem, root-key.pem) and, for every planned cluster, an
intermediate CA in Istio's cacerts layout (<cluster>/ca-cert.pem, ca-key.pem,
root-cert.pem, cert-chain.pem). Keys are ECDSA P-256, mode 0600.

Valid files are reused, so a re-run changes nothing; files that are damaged,
do not chain to the root or have less than a third of their lifetime left
are renewed, and the output says why. --rotate renews everything.`,
		Example: `  meshctl ca --clusters 3
  meshctl ca --topology multicluster.json -o json
  meshctl ca --rotate`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := g.outputFormat()
			if err != nil {
				return err
			}
			plan, err := g.plan()
			if err != nil {
				return err
			}
			var names []string
			for _, c := range plan.Clusters {
				names = append(names, c.Name)
			}
			s := g.settings
			res, err := meshca.New(meshca.Dir(s.GetString("artifacts"), plan.Env),
				meshca.WithName(plan.Env),
				meshca.WithRotate(s.GetBool("rotate")),
				meshca.WithRootLifetime(s.GetDuration("root-lifetime")),
				meshca.WithIntermediateLifetime(s.GetDuration("intermediate-lifetime")),
			).Ensure(names...)
			if err != nil {
				return err
			}
			return print(g.streams.Out, format, res, func(w io.Writer) error { return printCA(w, res) })
		},
	}
	f := cmd.Flags()
	addPlanFlags(f)
	f.Bool("rotate", false, "renew the root and every intermediate, even if valid")
	f.Duration("root-lifetime", meshca.DefaultRootLifetime, "lifetime of a new root CA")
	f.Duration("intermediate-lifetime", meshca.DefaultIntermediateLifetime, "lifetime of a new intermediate CA (cut short where the root expires first)")
	addOutputFlag(cmd)
	return cmd
}

func printCA(w io.Writer, r *meshca.Result) error {
	t := newTable(w, "CA", "ACTION", "EXPIRES", "DIR")
	row := func(name string, f meshca.Files) {
		action := f.Action
		if f.Reason != "" {
			action += " (" + f.Reason + ")"
		}
		t.row(name, action, f.NotAfter.UTC().Format(time.DateOnly), f.Dir)
	}
	row("root", r.Root)
	for _, c := range r.Clusters {
		row(c.Cluster, c)
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nEach cluster's directory holds Istio's cacerts files: %s, %s, %s, %s.\n",
		meshca.CACertFile, meshca.CAKeyFile, meshca.RootCertFile, meshca.CertChainFile)
	return err
}
