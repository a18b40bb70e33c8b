package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshctl/meshctl/pkg/dataplane/ca"
	"github.com/meshctl/meshctl/pkg/dataplane/csr"
	"github.com/meshctl/meshctl/pkg/dataplane/installcni"
	"github.com/meshctl/meshctl/pkg/dataplane/nodeagent"
	"github.com/meshctl/meshctl/pkg/dataplane/proxy"
	"github.com/meshctl/meshctl/pkg/dataplane/signer"
	"github.com/meshctl/meshctl/pkg/dataplane/zds"
)

// The dataplane image runs this one binary with these subcommands; they are
// hidden because people never run them, the charts' Pod specs do. Every
// flag can also be set as MESHCTL_<FLAG> (settings.go), and the two values
// a Pod learns from the downward API are read from NODE_NAME and
// POD_NAMESPACE, the names upstream's charts use.
func newDataplaneCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "dataplane",
		Short:  "Entry points of the dataplane image (run by the meshctl charts' Pods)",
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	cmd.AddCommand(
		newInstallCNICommand(g),
		newNodeAgentCommand(g),
		newProxyCommand(g),
		newSignerCommand(g),
	)
	return cmd
}

// slogger is the dataplane's structured logger: these commands run in Pods,
// where one line per event, key=value, is what `kubectl logs` readers want.
func (g *globals) slogger() *slog.Logger {
	level := slog.LevelInfo
	if g.opts.Verbosity >= 2 {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(g.streams.Err, &slog.HandlerOptions{Level: level}))
}

// installCNIOptions are dataplane install-cni's flags.
type installCNIOptions struct {
	CNIConfDir        string
	HostCNIConfDir    string
	CNIBinDir         string
	PluginBinary      string
	ServiceAccountDir string
	AgentSocket       string
	ExcludeNamespaces []string
	RepairThrottle    time.Duration
	ReadyAddr         string
	DaemonSet         string
	Namespace         string
}

func newInstallCNICommand(g *globals) *cobra.Command {
	o := &installCNIOptions{}
	cmd := &cobra.Command{
		Use:   "install-cni",
		Short: "Install meshctl's CNI plugin on this node and keep it installed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.slogger()
			opts := []installcni.Option{
				installcni.WithCNIConfDir(o.CNIConfDir),
				installcni.WithHostCNIConfDir(o.HostCNIConfDir),
				installcni.WithCNIBinDir(o.CNIBinDir),
				installcni.WithAgentSocket(o.AgentSocket),
				installcni.WithServiceAccountDir(o.ServiceAccountDir),
				installcni.WithExcludeNamespaces(o.ExcludeNamespaces...),
				installcni.WithRepairThrottle(o.RepairThrottle),
				installcni.WithReadyAddr(o.ReadyAddr),
				installcni.WithLogger(log),
			}
			if o.PluginBinary != "" {
				opts = append(opts, installcni.WithPluginBinary(o.PluginBinary))
			}
			if ds := o.DaemonSet; ds != "" {
				check, err := upgradeCheck(podNamespace(o.Namespace), ds, log)
				if err != nil {
					return err
				}
				opts = append(opts, installcni.WithUpgradeCheck(check))
			}
			return installcni.Run(cmd.Context(), opts...)
		},
	}
	f := flags{cmd.Flags()}
	f.stringVar(&o.CNIConfDir, "cni-conf-dir", "/host/etc/cni/net.d", "the host's CNI config dir as mounted in this container")
	f.stringVar(&o.HostCNIConfDir, "host-cni-conf-dir", "/etc/cni/net.d", "the same dir as the host sees it")
	f.stringVar(&o.CNIBinDir, "cni-bin-dir", "/host/opt/cni/bin", "the host's CNI bin dir as mounted in this container")
	f.stringVar(&o.PluginBinary, "plugin-binary", "", "binary to install as the plugin (default: this executable)")
	f.stringVar(&o.ServiceAccountDir, "service-account-dir", "/var/run/secrets/kubernetes.io/serviceaccount", "the mounted service account, whose token and CA go into the plugin's kubeconfig")
	f.stringVar(&o.AgentSocket, "agent-socket", "/var/run/meshctl/pluginevent.sock", "node agent socket the plugin posts pods to (a host path)")
	f.stringSliceVar(&o.ExcludeNamespaces, "exclude-namespaces", []string{"kube-system"}, "namespaces whose pods are never meshed")
	f.durationVar(&o.RepairThrottle, "repair-throttle", time.Second, "minimum time between two repairs of the CNI config")
	f.stringVar(&o.ReadyAddr, "ready-addr", ":15022", "serve GET /readyz here: 200 while the plugin is chained")
	f.stringVar(&o.DaemonSet, "daemonset", "", "this Pod's DaemonSet: while it exists, exiting is an upgrade and the plugin stays installed")
	f.stringVar(&o.Namespace, "namespace", "", "this Pod's namespace (default: $POD_NAMESPACE)")
	return cmd
}

// upgradeCheck tells a rolling update from an uninstall, as istio-cni does:
// while the DaemonSet that owns this Pod still exists, a new Pod is about to
// take over and the plugin must stay, or pods created in between would
// start unmeshed; once it is gone (or cannot be read, e.g. because
// uninstall removed our service account first), clean up.
func upgradeCheck(ns, daemonset string, log *slog.Logger) (func() bool, error) {
	if ns == "" {
		return nil, errors.New("--daemonset needs the Pod's namespace: set --namespace or POD_NAMESPACE")
	}
	cs, err := inClusterClient()
	if err != nil {
		return nil, err
	}
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, daemonset, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false
		case err != nil:
			log.Warn("cannot read own DaemonSet: treating exit as an uninstall", "daemonset", ns+"/"+daemonset, "err", err)
			return false
		}
		return ds.DeletionTimestamp == nil
	}, nil
}

// nodeAgentOptions are dataplane node-agent's flags.
type nodeAgentOptions struct {
	NodeName          string
	ExcludeNamespaces []string
	AgentSocket       string
	ZDSSocket         string
	StateDir          string
	ProcRoot          string
	MetricsAddr       string
}

func newNodeAgentCommand(g *globals) *cobra.Command {
	o := &nodeAgentOptions{}
	cmd := &cobra.Command{
		Use:   "node-agent",
		Short: "Mesh this node's pods and serve ZDS to the node proxy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			node := firstNonEmpty(o.NodeName, os.Getenv("NODE_NAME"))
			if node == "" {
				return errors.New("node name not set: set --node-name or NODE_NAME (downward API spec.nodeName)")
			}
			return nodeagent.Run(cmd.Context(),
				nodeagent.WithNodeName(node),
				nodeagent.WithExcludeNamespaces(o.ExcludeNamespaces...),
				nodeagent.WithPluginSocket(o.AgentSocket),
				nodeagent.WithZDSSocket(o.ZDSSocket),
				nodeagent.WithStateDir(o.StateDir),
				nodeagent.WithProcRoot(o.ProcRoot),
				nodeagent.WithMetricsAddr(o.MetricsAddr),
				nodeagent.WithLogger(g.slogger()),
			)
		},
	}
	f := flags{cmd.Flags()}
	f.stringVar(&o.NodeName, "node-name", "", "this node's name (default: $NODE_NAME)")
	f.stringSliceVar(&o.ExcludeNamespaces, "exclude-namespaces", []string{"kube-system"}, "namespaces whose pods are never meshed")
	f.stringVar(&o.AgentSocket, "agent-socket", "/var/run/meshctl/pluginevent.sock", "unix socket the CNI plugin posts pods to")
	f.stringVar(&o.ZDSSocket, "zds-socket", zds.DefaultSocketPath, "unix socket the node proxy connects to (ZDS)")
	f.stringVar(&o.StateDir, "state-dir", "/var/run/meshctl/agent", "host dir remembering meshed pods across restarts")
	f.stringVar(&o.ProcRoot, "proc-root", "/proc", "the host's procfs (the Pod needs hostPID)")
	f.stringVar(&o.MetricsAddr, "metrics-addr", ":15014", "serve Prometheus metrics here (empty: off)")
	return cmd
}

// proxyOptions are dataplane proxy's flags.
type proxyOptions struct {
	ZDSSocket   string
	TrustDomain string
	MeshCIDRs   []netip.Prefix
	CertTTL     time.Duration
	AdminAddr   string
	MetricsAddr string
	ReadyAddr   string
}

func newProxyCommand(g *globals) *cobra.Command {
	o := &proxyOptions{}
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the HBONE node proxy for the pods the node agent hands over",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := inClusterClient()
			if err != nil {
				return err
			}
			return proxy.Run(cmd.Context(),
				proxy.WithWorkloadEvents(proxy.ZDS(o.ZDSSocket)),
				proxy.WithTrustDomain(o.TrustDomain),
				proxy.WithFetcher(csr.NewClient(cs, csr.WithTTL(o.CertTTL))),
				proxy.WithAddresses(o.AdminAddr, o.MetricsAddr, o.ReadyAddr),
				proxy.WithMeshCIDRs(o.MeshCIDRs...),
				proxy.WithLogger(g.slogger()),
			)
		},
	}
	f := flags{cmd.Flags()}
	f.stringVar(&o.ZDSSocket, "zds-socket", zds.DefaultSocketPath, "the node agent's ZDS socket")
	f.stringVar(&o.TrustDomain, "trust-domain", "cluster.local", "the mesh trust domain")
	f.add(&prefixListValue{p: &o.MeshCIDRs}, "mesh-cidrs", "", "destinations sent over HBONE to <ip>:15008 (the mesh's pod CIDRs)")
	f.durationVar(&o.CertTTL, "cert-ttl", 24*time.Hour, "requested workload certificate lifetime")
	f.stringVar(&o.AdminAddr, "admin-addr", "127.0.0.1:15000", "admin server (/config_dump): keep it on localhost")
	f.stringVar(&o.MetricsAddr, "metrics-addr", ":15020", "Prometheus metrics")
	f.stringVar(&o.ReadyAddr, "ready-addr", ":15021", "readiness (/healthz/ready)")
	return cmd
}

// signerOptions are dataplane signer's flags.
type signerOptions struct {
	CacertsDir  string
	SignerName  string
	TrustDomain string
	ProxyUsers  []string
	MaxTTL      time.Duration
}

func newSignerCommand(g *globals) *cobra.Command {
	o := &signerOptions{}
	cmd := &cobra.Command{
		Use:   "signer",
		Short: "Approve and sign workload CSRs with the cluster intermediate",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCacerts(o.CacertsDir)
			if err != nil {
				return err
			}
			cs, err := inClusterClient()
			if err != nil {
				return err
			}
			users := o.ProxyUsers
			if len(users) == 0 {
				return errors.New("--proxy-users is empty: no node proxy could ever obtain a certificate")
			}
			log := g.slogger()
			log.Info("signer starting", "signerName", o.SignerName, "proxyUsers", users)
			return signer.New(cs, c,
				signer.WithSignerName(o.SignerName),
				signer.WithTrustDomain(o.TrustDomain),
				signer.WithProxyUsers(users...),
				signer.WithMaxTTL(o.MaxTTL),
				signer.WithLogger(log),
			).Run(cmd.Context())
		},
	}
	f := flags{cmd.Flags()}
	f.stringVar(&o.CacertsDir, "cacerts-dir", "/etc/cacerts", "the cluster's cacerts Secret as mounted (ca-cert.pem, ca-key.pem, cert-chain.pem, root-cert.pem)")
	f.stringVar(&o.SignerName, "signer-name", csr.SignerName, "the certificates.k8s.io signerName served")
	f.stringVar(&o.TrustDomain, "trust-domain", "cluster.local", "trust domain of issued identities")
	f.stringSliceVar(&o.ProxyUsers, "proxy-users", nil, "users allowed to request workload identities (system:serviceaccount:<ns>:<node proxy sa>)")
	f.durationVar(&o.MaxTTL, "max-ttl", 24*time.Hour, "longest certificate lifetime issued")
	return cmd
}

// loadCacerts reads the four files of Istio's cacerts layout.
func loadCacerts(dir string) (*ca.CA, error) {
	files := map[string][]byte{}
	for _, name := range []string{"ca-cert.pem", "ca-key.pem", "cert-chain.pem", "root-cert.pem"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading cacerts: %w", err)
		}
		files[name] = b
	}
	c, err := ca.FromPEM(files["ca-cert.pem"], files["ca-key.pem"], files["cert-chain.pem"], files["root-cert.pem"])
	if err != nil {
		return nil, fmt.Errorf("cacerts in %s: %w", dir, err)
	}
	return c, nil
}

func inClusterClient() (kubernetes.Interface, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("loading in-cluster config (this command runs in a Pod): %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building Kubernetes client: %w", err)
	}
	return cs, nil
}

func podNamespace(flag string) string { return firstNonEmpty(flag, os.Getenv("POD_NAMESPACE")) }

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
