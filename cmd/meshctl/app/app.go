// Package app is meshctl's command tree. It alone binds flags, environment
// variables and the config file (viper), chooses exit codes and prints
// errors; every command is a thin layer over a pkg/* library.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/internal/trace"
	"github.com/meshctl/meshctl/pkg/cluster"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// Streams are the command's standard streams; tests replace them.
type Streams struct {
	Out, Err io.Writer
}

// Main runs meshctl with os.Args and returns the process exit code: 0 on
// success, 1 on failure, 130 when interrupted.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	trace.Start()
	defer trace.End()
	return Run(ctx, os.Args[1:], Streams{Out: os.Stdout, Err: os.Stderr}, nil)
}

// Run runs meshctl with args. newProvider, when not nil, replaces the
// cluster provider (tests inject fakes of kind and Docker through it).
func Run(ctx context.Context, args []string, s Streams, newProvider func(...cluster.ProviderOption) *cluster.Provider) int {
	if newProvider == nil {
		newProvider = cluster.NewProvider
	}
	g := &globals{streams: s, newProvider: newProvider}
	root := newRootCommand(g)
	root.SetArgs(args)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(s.Err, "ERROR: %v\n", err)
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return 130
	}
	return 1
}

// globals are what every command shares: the streams, the provider, and the
// root's options with the logger they configure.
type globals struct {
	streams     Streams
	newProvider func(...cluster.ProviderOption) *cluster.Provider
	opts        rootOptions
	logger      *cli.Logger
}

// rootOptions are the root command's persistent flags.
type rootOptions struct {
	Config    string
	Env       string
	Artifacts string
	Verbosity int
	Quiet     bool
}

func (g *globals) provider() *cluster.Provider {
	return g.newProvider(
		cluster.ProviderWithLogger(g.logger),
		cluster.ProviderWithArtifacts(g.opts.Artifacts),
	)
}

func newRootCommand(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "meshctl",
		Short: "Multi-cluster mesh test environments on kind",
		Long: `meshctl creates multi-cluster test environments on kind: clusters in
parallel, connected, with a shared root CA and meshctl's own CNI and HBONE
dataplane, wire-compatible with Istio ambient.

Every flag can also be set in a config file (--config, YAML, keys are the flag
names) or as an environment variable MESHCTL_<FLAG> (MESHCTL_IP_FAMILY=dual).
Flags win over environment variables, which win over the config file.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadSettings(cmd, &g.opts.Config); err != nil {
				return err
			}
			out, isFile := g.streams.Err.(*os.File)
			g.logger = cli.NewLogger(g.streams.Err,
				cli.WithVerbosity(g.opts.Verbosity),
				cli.WithQuiet(g.opts.Quiet),
				cli.WithColor(isFile && isatty.IsTerminal(out.Fd())),
			)
			return nil
		},
	}
	pf, o := flags{root.PersistentFlags()}, &g.opts
	pf.stringVar(&o.Config, "config", "", "meshctl config file (YAML; keys are flag names)")
	pf.stringVar(&o.Env, "env", model.DefaultEnv, "environment name: environments with different names live side by side")
	pf.stringVar(&o.Artifacts, "artifacts", cluster.DefaultArtifacts, "directory for kubeconfigs, logs and other artifacts")
	pf.intVarP(&o.Verbosity, "verbosity", "v", 0, unboundedLo, unboundedHi, "log verbosity: 1 shows each cluster's progress, 2 and more shows details")
	pf.boolVarP(&o.Quiet, "quiet", "q", false, "print only errors and the result")
	root.AddCommand(
		newUpCommand(g),
		newDownCommand(g),
		newConnectCommand(g),
		newRemoteSecretCommand(g),
		newCheckCommand(g),
		newListCommand(g),
		newStatusCommand(g),
		newKubeconfigCommand(g),
		newTopologyCommand(g),
		newValuesCommand(g),
		newCACommand(g),
		newVersionCommand(g),
		newInstallCommand(g),
		newUninstallCommand(g),
		newDataplaneCommand(g),
	)
	return root
}
