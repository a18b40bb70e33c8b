package app

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/pkg/connect/check"
)

func newCheckCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Prove that an environment works",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newCheckConnectivityCommand(g))
	return cmd
}

// checkConnectivityOptions are check connectivity's flags.
type checkConnectivityOptions struct {
	Image   string
	Timeout time.Duration
	Output  string
	Meshed  bool
}

func newCheckConnectivityCommand(g *globals) *cobra.Command {
	o := &checkConnectivityOptions{}
	cmd := &cobra.Command{
		Use:   "connectivity",
		Short: "Prove pod-to-pod and pod-to-service traffic between the clusters of a network",
		Long: `Run a server pod (busybox nc) behind a ClusterIP Service in every cluster,
and beside it a client pod, in which the probes run (as kubectl exec would)
once every server runs: each connects to the server of every cluster on its
network, its own included, by each pod IP and each service IP (IPv4 and
IPv6). Clusters on other networks are reached through east-west
gateways: they are listed as "via gateway", not tested (but see --meshed).

Everything runs in the namespace meshctl-check, deleted afterwards: its pods
at once, the namespace itself a few seconds later by the namespace
controller, which the check does not wait for (the next check does, and
removes what an interrupted run left). The exit code is 1 when any probe
fails; the output names each failed pair and what nc said.

With --meshed the namespace is in the ambient mesh (labelled
istio.io/dataplane-mode=ambient, so meshctl's dataplane must be installed),
each cluster has a Service per cluster's server (server-<cluster>, its
endpoint only there), and every probe is judged by what the node proxies
recorded (their /debug/connections, read through the API server): the
client's node proxy must have tunnelled it over HBONE and the server's node
proxy received it over HBONE. The output shows the identity each side saw;
a call that went in plaintext, or bypassed the proxies, fails. A server on
another network is tested too (path "gateway"), by the client's own
cluster's VIP of its Service: the client's node proxy must have sent it
through that network's east-west gateway (double HBONE; the HBONE column
names the gateway), and the server's node proxy received it from the
gateway with the client's identity. One that went through no gateway fails.`,
		Example: `  meshctl check connectivity
  meshctl check connectivity --env ci -o json
  meshctl check connectivity --meshed`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			status := cli.NewStatus(g.logger)
			status.Start("Checking connectivity between the pods of every cluster")
			res, err := check.New(g.provider(),
				check.WithLogger(g.logger),
				check.WithImage(o.Image),
				check.WithTimeout(o.Timeout),
				check.WithMeshed(o.Meshed),
			).Check(cmd.Context(), g.opts.Env)
			status.End(err == nil && res.OK)
			if err != nil {
				return err
			}
			if err := print(g.streams.Out, o.Output, res, func(w io.Writer) error { return printCheck(w, res) }); err != nil {
				return err
			}
			if failed := res.Failed(); len(failed) > 0 {
				var lines []string
				for _, p := range failed {
					lines = append(lines, fmt.Sprintf("%s → %s by %s %s: %s", p.From, p.To, p.Path, p.Address, p.Error))
				}
				return fmt.Errorf("connectivity check failed: %d of %d probes:\n  %s", len(failed), len(res.Probes), strings.Join(lines, "\n  "))
			}
			return nil
		},
	}
	f := flags{cmd.Flags()}
	f.imageVar(&o.Image, "image", check.DefaultImage, "image of the server and client pods (needs busybox sh and nc; pulled only if not on the node)")
	f.durationVar(&o.Timeout, "timeout", check.DefaultTimeout, "how long to wait for pods to start and probes to finish")
	f.boolVar(&o.Meshed, "meshed", false, "probe from an ambient namespace and require every call, other networks' through their east-west gateway, to go over HBONE, showing the peer identities the node proxies saw")
	addOutputFlag(f, &o.Output)
	return cmd
}

func printCheck(w io.Writer, r *check.Result) error {
	if r.Meshed {
		return printMeshedCheck(w, r)
	}
	t := newTable(w, "FROM", "TO", "PATH", "ADDRESS", "RESULT")
	for _, p := range r.Probes {
		result := p.Status
		if p.Error != "" {
			result += ": " + p.Error
		}
		addr := p.Address
		if addr == "" {
			addr = "-"
		}
		t.row(p.From, p.To, p.Path, addr, result)
	}
	return t.flush()
}

// printMeshedCheck adds what the node proxies saw: HBONE or not (and
// through which east-west gateway), and the peer identity on each side.
func printMeshedCheck(w io.Writer, r *check.Result) error {
	t := newTable(w, "FROM", "TO", "PATH", "ADDRESS", "HBONE", "CLIENT SAW", "SERVER SAW", "RESULT")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, p := range r.Probes {
		result := p.Status
		if p.Error != "" {
			result += ": " + p.Error
		}
		hbone, clientSaw, serverSaw := "-", "-", "-"
		if m := p.Mesh; m != nil {
			hbone = "no"
			if m.HBONE {
				hbone = "yes"
			}
			if m.Gateway != "" {
				hbone += " via " + m.Gateway
			}
			clientSaw, serverSaw = dash(m.ServerIdentity), dash(m.ClientIdentity)
		}
		t.row(p.From, p.To, p.Path, dash(p.Address), hbone, clientSaw, serverSaw, result)
	}
	return t.flush()
}
