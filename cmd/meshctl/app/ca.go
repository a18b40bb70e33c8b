package app

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/pkg/meshca"
)

// caOptions are ca's flags.
type caOptions struct {
	plan                 planFlags
	Rotate               bool
	RootLifetime         time.Duration
	IntermediateLifetime time.Duration
	Output               string
}

func newCACommand(g *globals) *cobra.Command {
	o := &caOptions{}
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
			plan, err := g.plan(&o.plan, nil)
			if err != nil {
				return err
			}
			var names []string
			for _, c := range plan.Clusters {
				names = append(names, c.Name)
			}
			res, err := meshca.New(meshca.Dir(g.opts.Artifacts, plan.Env),
				meshca.WithName(plan.Env),
				meshca.WithRotate(o.Rotate),
				meshca.WithRootLifetime(o.RootLifetime),
				meshca.WithIntermediateLifetime(o.IntermediateLifetime),
			).Ensure(names...)
			if err != nil {
				return err
			}
			return print(g.streams.Out, o.Output, res, func(w io.Writer) error { return printCA(w, res) })
		},
	}
	f := flags{cmd.Flags()}
	o.plan.addFlags(f)
	f.boolVar(&o.Rotate, "rotate", false, "renew the root and every intermediate, even if valid")
	f.durationVar(&o.RootLifetime, "root-lifetime", meshca.DefaultRootLifetime, "lifetime of a new root CA")
	f.durationVar(&o.IntermediateLifetime, "intermediate-lifetime", meshca.DefaultIntermediateLifetime, "lifetime of a new intermediate CA (cut short where the root expires first)")
	addOutputFlag(f, &o.Output)
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
