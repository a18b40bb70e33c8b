package dataplanecmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// Command is one entry point of the dataplane image.
type Command struct {
	Name  string
	Short string
	// bind defines the command's flags on fs and returns what runs the
	// command once they are parsed.
	bind func(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) error
}

// Commands are the dataplane's entry points, in the order usage lists them.
func Commands() []Command {
	return []Command{
		{"install-cni", "Install meshctl's CNI plugin on this node and keep it installed", installCNI},
		{"node-agent", "Mesh this node's pods and serve ZDS to the node proxy", nodeAgent},
		{"proxy", "Run the HBONE node proxy for the pods the node agent hands over (also as `proxy ztunnel`, as Istio's ztunnel chart runs it)", proxyCommand},
		{"gateway", "Run the east-west gateway: tunnels from other networks to this network's endpoints", gatewayCommand},
		{"signer", "Approve and sign workload CSRs with the cluster intermediate", signerCommand},
	}
}

// Main runs the dataplane binary with args (os.Args[1:]) and returns the
// exit code: 0 on success, 1 on failure, 130 when stopped by a signal (a
// Pod being deleted). A leading "dataplane" is skipped, so the image's
// charts run `dataplane proxy …` whether the image holds this binary or
// the whole meshctl.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 && args[0] == "dataplane" {
		args = args[1:]
	}
	if len(args) == 0 {
		usage(stderr)
		return 1
	}
	if slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0]) {
		usage(stdout)
		return 0
	}
	err := Run(ctx, args[0], args[1:], stderr)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "ERROR: %v\n", err)
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return 130
	}
	return 1
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "The entry points of meshctl's dataplane image, run by the meshctl charts' Pods.")
	fmt.Fprintln(w, "\nUsage: meshctl-dataplane [dataplane] COMMAND [flags]   (COMMAND --help lists its flags)\n\nCommands:")
	for _, c := range Commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.Name, c.Short)
	}
}

// Run runs the command name with its flags args until ctx is done, logging
// to stderr. --help prints the command's flags to stderr and returns nil.
func Run(ctx context.Context, name string, args []string, stderr io.Writer) error {
	i := slices.IndexFunc(Commands(), func(c Command) bool { return c.Name == name })
	if i < 0 {
		var names []string
		for _, c := range Commands() {
			names = append(names, c.Name)
		}
		return fmt.Errorf("unknown dataplane command %q (want one of %s)", name, strings.Join(names, ", "))
	}
	cmd := Commands()[i]
	args, asZtunnel := ztunnelShape(name, args)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, usage printed only when asked for
	var verbosity int
	fs.IntVar(&verbosity, "verbosity", 0, "log verbosity: 2 and more logs debug events")
	fs.IntVar(&verbosity, "v", 0, "shorthand for --verbosity")
	run := cmd.bind(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "%s\n\nUsage: %s [flags]\n\nFlags (each also MESHCTL_<FLAG>):\n", cmd.Short, name)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q (it takes flags only)", name, fs.Arg(0))
	}
	if err := fromEnv(fs, os.LookupEnv); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if asZtunnel {
		if err := fromZtunnelEnv(fs, os.LookupEnv); err != nil {
			return fmt.Errorf("%s %s: %w", name, ZtunnelArg, err)
		}
	}
	level := slog.LevelInfo
	if verbosity >= 2 {
		level = slog.LevelDebug
	}
	// These commands run in Pods, where one line per event, key=value, is
	// what `kubectl logs` readers want.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return run(ctx, log)
}

// fromEnv sets every flag the command line left unset from MESHCTL_<FLAG>
// (dashes as underscores), when that variable is set.
func fromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["v"] {
		set["verbosity"] = true
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || f.Name == "v" {
			return
		}
		key := "MESHCTL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(key); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", key, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// listValue is a comma-separated list flag, as pflag's StringSlice: the
// first use replaces the default, later uses append.
type listValue struct {
	vals *[]string
	set  bool
}

func newList(fs *flag.FlagSet, name string, def []string, usage string) *[]string {
	vals := slices.Clone(def)
	fs.Var(&listValue{vals: &vals}, name, usage)
	return &vals
}

func (l *listValue) String() string {
	if l == nil || l.vals == nil {
		return ""
	}
	return strings.Join(*l.vals, ",")
}

func (l *listValue) Set(s string) error {
	var parts []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, p)
		}
	}
	if !l.set {
		*l.vals, l.set = parts, true
		return nil
	}
	*l.vals = append(*l.vals, parts...)
	return nil
}
