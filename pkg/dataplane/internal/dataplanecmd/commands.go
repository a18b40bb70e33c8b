package dataplanecmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshctl/meshctl/pkg/dataplane/certs/istioca"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/csr"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/installcni"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/nodeagent"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/proxy"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/signer"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/zds"
	"github.com/meshctl/meshctl/pkg/kubeclient"
	"github.com/meshctl/meshctl/pkg/meshca"
)

func installCNI(fs *flag.FlagSet) func(context.Context, *slog.Logger) error {
	confDir := fs.String("cni-conf-dir", "/host/etc/cni/net.d", "the host's CNI config dir as mounted in this container")
	hostConfDir := fs.String("host-cni-conf-dir", "/etc/cni/net.d", "the same dir as the host sees it")
	binDir := fs.String("cni-bin-dir", "/host/opt/cni/bin", "the host's CNI bin dir as mounted in this container")
	plugin := fs.String("plugin-binary", "", "binary to install as the plugin (default: this executable)")
	saDir := fs.String("service-account-dir", "/var/run/secrets/kubernetes.io/serviceaccount", "the mounted service account, whose token and CA go into the plugin's kubeconfig")
	socket := fs.String("agent-socket", ambient.DefaultAgentSocket, "node agent socket the plugin posts pods to (a host path)")
	exclude := newList(fs, "exclude-namespaces", ambient.DefaultExcludedNamespaces, "namespaces whose pods are never meshed (comma-separated)")
	throttle := fs.Duration("repair-throttle", time.Second, "minimum time between two repairs of the CNI config")
	ready := fs.String("ready-addr", ":15022", "serve GET /readyz here: 200 while the plugin is chained")
	daemonset := fs.String("daemonset", "", "this Pod's DaemonSet: while it exists, exiting is an upgrade and the plugin stays installed")
	namespace := fs.String("namespace", "", "this Pod's namespace (default: $POD_NAMESPACE)")
	return func(ctx context.Context, log *slog.Logger) error {
		opts := []installcni.Option{
			installcni.WithCNIConfDir(*confDir),
			installcni.WithHostCNIConfDir(*hostConfDir),
			installcni.WithCNIBinDir(*binDir),
			installcni.WithAgentSocket(*socket),
			installcni.WithServiceAccountDir(*saDir),
			installcni.WithExcludeNamespaces(*exclude...),
			installcni.WithRepairThrottle(*throttle),
			installcni.WithReadyAddr(*ready),
			installcni.WithLogger(log),
		}
		if *plugin != "" {
			opts = append(opts, installcni.WithPluginBinary(*plugin))
		}
		if *daemonset != "" {
			check, err := upgradeCheck(firstNonEmpty(*namespace, os.Getenv("POD_NAMESPACE")), *daemonset, log)
			if err != nil {
				return err
			}
			opts = append(opts, installcni.WithUpgradeCheck(check))
		}
		return installcni.Run(ctx, opts...)
	}
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

func nodeAgent(fs *flag.FlagSet) func(context.Context, *slog.Logger) error {
	nodeName := fs.String("node-name", "", "this node's name (default: $NODE_NAME)")
	exclude := newList(fs, "exclude-namespaces", ambient.DefaultExcludedNamespaces, "namespaces whose pods are never meshed (comma-separated)")
	agentSocket := fs.String("agent-socket", ambient.DefaultAgentSocket, "unix socket the CNI plugin posts pods to")
	zdsSocket := fs.String("zds-socket", zds.DefaultSocketPath, "unix socket the node proxy connects to (ZDS)")
	stateDir := fs.String("state-dir", "/var/run/meshctl/agent", "host dir remembering meshed pods across restarts")
	procRoot := fs.String("proc-root", "/proc", "the host's procfs (the Pod needs hostPID)")
	metrics := fs.String("metrics-addr", ":15014", "serve Prometheus metrics here (empty: off)")
	return func(ctx context.Context, log *slog.Logger) error {
		node := firstNonEmpty(*nodeName, os.Getenv("NODE_NAME"))
		if node == "" {
			return errors.New("node name not set: set --node-name or NODE_NAME (downward API spec.nodeName)")
		}
		return nodeagent.Run(ctx,
			nodeagent.WithNodeName(node),
			nodeagent.WithExcludeNamespaces(*exclude...),
			nodeagent.WithPluginSocket(*agentSocket),
			nodeagent.WithZDSSocket(*zdsSocket),
			nodeagent.WithStateDir(*stateDir),
			nodeagent.WithProcRoot(*procRoot),
			nodeagent.WithMetricsAddr(*metrics),
			nodeagent.WithLogger(log),
		)
	}
}

func proxyCommand(fs *flag.FlagSet) func(context.Context, *slog.Logger) error {
	zdsSocket := fs.String("zds-socket", zds.DefaultSocketPath, "the node agent's ZDS socket: meshctl-cni's or Istio's istio-cni's, which listen at the same path")
	trustDomain := fs.String("trust-domain", ambient.DefaultTrustDomain, "the mesh trust domain")
	meshCIDRs := newList(fs, "mesh-cidrs", nil, "destinations sent over HBONE to <ip>:15008 (the mesh's pod CIDRs, comma-separated)")
	certTTL := fs.Duration("cert-ttl", 24*time.Hour, "requested workload certificate lifetime")
	admin := fs.String("admin-addr", "127.0.0.1:15000", "admin server (/config_dump): keep it on localhost")
	metrics := fs.String("metrics-addr", ":15020", "Prometheus metrics")
	ready := fs.String("ready-addr", ":15021", "readiness (/healthz/ready)")
	discovery := fs.Bool("discovery", true, "route by a model of the mesh's workloads and services, read from this cluster and the clusters its remote secrets name (off: mesh CIDRs only, any mesh identity accepted)")
	clusterName := fs.String("cluster", "Kubernetes", "this cluster's name in the mesh (Istio's clusterName)")
	network := fs.String("network", "", "this cluster's network (Istio's global.network)")
	systemNS := fs.String("system-namespace", "", "namespace of the remote secrets (default: $POD_NAMESPACE, else istio-system)")
	exclude := newList(fs, "exclude-namespaces", ambient.DefaultExcludedNamespaces, "namespaces whose pods are never meshed, as the node agent's (comma-separated)")
	rootNS := fs.String("root-namespace", ambient.DefaultRootNamespace, "Istio's root namespace: its AuthorizationPolicies and PeerAuthentications apply mesh-wide")
	caAddress := fs.String("ca-address", "", "istiod's CA (e.g. istiod.istio-system.svc:15012): fetch workload certificates from it as ztunnel does (empty: Kubernetes CSRs signed by meshctl's signer)")
	caRoot := fs.String("ca-root", "/var/run/secrets/istio/root-cert.pem", "with --ca-address, the mesh root istiod's certificate is verified with: a PEM file (the mounted istio-ca-root-cert ConfigMap), or configmap:[NAMESPACE/]NAME to read its root-cert.pem through the API (needs get on configmaps)")
	caToken := fs.String("ca-token", "/var/run/secrets/tokens/istio-token", "with --ca-address or --xds-address, the projected service-account token (audience istio-ca) sent to istiod")
	xdsAddress := fs.String("xds-address", "", "istiod's XDS (e.g. istiod.istio-system.svc:15012): workloads, services and authorization policies come from it as ztunnel's do, verified with --ca-root and authenticated with --ca-token (empty: read from this cluster and its remote secrets' clusters)")
	return func(ctx context.Context, log *slog.Logger) error {
		var cidrs []netip.Prefix
		for _, c := range *meshCIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				return fmt.Errorf("--mesh-cidrs: %w", err)
			}
			cidrs = append(cidrs, p)
		}
		// One getter: the policy watcher's config and the typed client
		// come from the same in-cluster config.
		kube := kubeclient.InCluster()
		cs, err := kube.Kubernetes()
		if err != nil {
			return fmt.Errorf("in-cluster client (this command runs in a Pod): %w", err)
		}
		cfg, err := kube.RESTConfig()
		if err != nil {
			return fmt.Errorf("in-cluster config (this command runs in a Pod): %w", err)
		}
		var fetcher certs.Fetcher = csr.NewClient(cs, csr.WithTTL(*certTTL))
		if *caAddress != "" {
			roots, err := caRootSource(*caRoot, firstNonEmpty(os.Getenv("POD_NAMESPACE"), ambient.DefaultSystemNamespace), cs)
			if err != nil {
				return err
			}
			c, err := istioca.New(istioca.Config{
				Address: *caAddress, Roots: roots, Token: istioca.TokenFile(*caToken),
				ClusterID: *clusterName, TTL: *certTTL,
			})
			if err != nil {
				return fmt.Errorf("--ca-address: %w", err)
			}
			defer c.Close()
			log.Info("workload certificates from istiod", "address", *caAddress, "root", *caRoot)
			fetcher = c
		}
		opts := []proxy.Option{
			proxy.WithWorkloadEvents(proxy.ZDS(*zdsSocket)),
			proxy.WithTrustDomain(*trustDomain),
			proxy.WithFetcher(fetcher),
			proxy.WithAddresses(*admin, *metrics, *ready),
			proxy.WithMeshCIDRs(cidrs...),
			proxy.WithLogger(log),
		}
		switch {
		case *xdsAddress != "":
			if *clusterName == "" {
				return errors.New("--cluster is empty: istiod authenticates the proxy's token against its cluster by name")
			}
			roots, err := caRootSource(*caRoot, firstNonEmpty(os.Getenv("POD_NAMESPACE"), ambient.DefaultSystemNamespace), cs)
			if err != nil {
				return err
			}
			opts = append(opts, proxy.WithXDS(proxy.XDS{
				Address: *xdsAddress, Roots: roots, Token: istioca.TokenFile(*caToken),
				Cluster: *clusterName, Network: *network, RootNamespace: *rootNS,
			}))
			log.Info("workloads, services and policies from istiod", "address", *xdsAddress, "root", *caRoot)
		case *discovery:
			opts = append(opts, proxy.WithPolicies(cfg, *rootNS))
			if *clusterName == "" {
				return errors.New("--cluster is empty: remote secrets name clusters, and this one needs a name to tell itself apart")
			}
			opts = append(opts, proxy.WithDiscovery(proxy.Discovery{
				Client: cs, Cluster: *clusterName, Network: *network,
				SystemNamespace:   firstNonEmpty(*systemNS, os.Getenv("POD_NAMESPACE"), ambient.DefaultSystemNamespace),
				ExcludeNamespaces: *exclude,
			}))
		default:
			opts = append(opts, proxy.WithPolicies(cfg, *rootNS))
		}
		return proxy.Run(ctx, opts...)
	}
}

// gatewayCommand runs the proxy's east-west gateway mode behind the
// istio-eastwestgateway Service. Its certificate is its own pod's, from
// meshctl's signer (which chains to the mesh root whichever CA issues the
// workloads'): istiod's CA lets only node accounts ask for an identity.
func gatewayCommand(fs *flag.FlagSet) func(context.Context, *slog.Logger) error {
	trustDomain := fs.String("trust-domain", ambient.DefaultTrustDomain, "the mesh trust domain")
	listen := fs.String("listen", ":15008", "where tunnels from other networks arrive (HBONE)")
	certTTL := fs.Duration("cert-ttl", 24*time.Hour, "requested certificate lifetime")
	admin := fs.String("admin-addr", "127.0.0.1:15000", "admin server (/config_dump): keep it on localhost")
	metrics := fs.String("metrics-addr", ":15020", "Prometheus metrics")
	ready := fs.String("ready-addr", ":15021", "readiness (/healthz/ready)")
	clusterName := fs.String("cluster", "Kubernetes", "this cluster's name in the mesh (Istio's clusterName)")
	network := fs.String("network", "", "the network this gateway leads into (Istio's global.network)")
	systemNS := fs.String("system-namespace", "", "namespace of the remote secrets (default: $POD_NAMESPACE, else istio-system)")
	exclude := newList(fs, "exclude-namespaces", ambient.DefaultExcludedNamespaces, "namespaces whose pods are never meshed, as the node agent's (comma-separated)")
	podName := fs.String("pod-name", "", "this Pod's name (default: $POD_NAME)")
	podUID := fs.String("pod-uid", "", "this Pod's UID (default: $POD_UID)")
	namespace := fs.String("namespace", "", "this Pod's namespace (default: $POD_NAMESPACE)")
	serviceAccount := fs.String("service-account", "", "this Pod's service account, whose identity the gateway proves (default: $SERVICE_ACCOUNT)")
	return func(ctx context.Context, log *slog.Logger) error {
		cfg := proxy.GatewayConfig{
			Namespace:      firstNonEmpty(*namespace, os.Getenv("POD_NAMESPACE")),
			ServiceAccount: firstNonEmpty(*serviceAccount, os.Getenv("SERVICE_ACCOUNT")),
			PodName:        firstNonEmpty(*podName, os.Getenv("POD_NAME")),
			PodUID:         firstNonEmpty(*podUID, os.Getenv("POD_UID")),
			Listen:         *listen,
		}
		switch {
		case cfg.Namespace == "":
			return errors.New("the gateway's namespace is not set: set --namespace or POD_NAMESPACE")
		case cfg.ServiceAccount == "":
			return errors.New("the gateway's service account is not set: set --service-account or SERVICE_ACCOUNT (downward API spec.serviceAccountName)")
		case cfg.PodName == "" || cfg.PodUID == "":
			return errors.New("the gateway's pod is not set: set --pod-name and --pod-uid, or POD_NAME and POD_UID (downward API metadata.name, metadata.uid)")
		case *network == "":
			return errors.New("--network is empty: a gateway leads into one network, and must know which endpoints are on it")
		case *clusterName == "":
			return errors.New("--cluster is empty: remote secrets name clusters, and this one needs a name to tell itself apart")
		}
		cs, err := inClusterClient()
		if err != nil {
			return err
		}
		return proxy.RunGateway(ctx, cfg,
			proxy.WithTrustDomain(*trustDomain),
			proxy.WithFetcher(csr.NewClient(cs, csr.WithTTL(*certTTL))),
			proxy.WithAddresses(*admin, *metrics, *ready),
			proxy.WithLogger(log),
			proxy.WithDiscovery(proxy.Discovery{
				Client: cs, Cluster: *clusterName, Network: *network,
				SystemNamespace:   firstNonEmpty(*systemNS, cfg.Namespace, ambient.DefaultSystemNamespace),
				ExcludeNamespaces: *exclude,
			}),
		)
	}
}

// caRootSource reads the mesh root from a file, or from a ConfigMap's
// root-cert.pem for "configmap:[NAMESPACE/]NAME" (NAMESPACE defaulting to
// ns). Either is re-read on every TLS handshake with istiod, so a rotated
// root needs no restart.
func caRootSource(spec, ns string, cs kubernetes.Interface) (func() ([]byte, error), error) {
	ref, ok := strings.CutPrefix(spec, "configmap:")
	if !ok {
		if spec == "" {
			return nil, errors.New("--ca-root is empty: istiod's certificate cannot be verified without the mesh root")
		}
		return func() ([]byte, error) {
			b, err := os.ReadFile(spec)
			if err != nil {
				return nil, fmt.Errorf("--ca-root: %w", err)
			}
			return b, nil
		}, nil
	}
	name := ref
	if n, m, found := strings.Cut(ref, "/"); found {
		ns, name = n, m
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--ca-root %q: want configmap:[NAMESPACE/]NAME", spec)
	}
	return func() ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("--ca-root: reading ConfigMap %s/%s: %w", ns, name, err)
		}
		root, ok := cm.Data["root-cert.pem"]
		if !ok {
			return nil, fmt.Errorf("--ca-root: ConfigMap %s/%s has no root-cert.pem", ns, name)
		}
		return []byte(root), nil
	}, nil
}

func signerCommand(fs *flag.FlagSet) func(context.Context, *slog.Logger) error {
	cacertsDir := fs.String("cacerts-dir", "/etc/cacerts", "the cluster's cacerts Secret as mounted (ca-cert.pem, ca-key.pem, cert-chain.pem, root-cert.pem)")
	signerName := fs.String("signer-name", csr.SignerName, "the certificates.k8s.io signerName served")
	trustDomain := fs.String("trust-domain", ambient.DefaultTrustDomain, "trust domain of issued identities")
	users := newList(fs, "proxy-users", nil, "users allowed to request workload identities (system:serviceaccount:<ns>:<node proxy sa>, comma-separated)")
	maxTTL := fs.Duration("max-ttl", 24*time.Hour, "longest certificate lifetime issued")
	return func(ctx context.Context, log *slog.Logger) error {
		c, err := meshca.LoadCA(*cacertsDir)
		if err != nil {
			return err
		}
		cs, err := inClusterClient()
		if err != nil {
			return err
		}
		if len(*users) == 0 {
			return errors.New("--proxy-users is empty: no node proxy could ever obtain a certificate")
		}
		log.Info("signer starting", "signerName", *signerName, "proxyUsers", *users)
		return signer.New(cs, c,
			signer.WithSignerName(*signerName),
			signer.WithTrustDomain(*trustDomain),
			signer.WithProxyUsers(*users...),
			signer.WithMaxTTL(*maxTTL),
			signer.WithLogger(log),
		).Run(ctx)
	}
}

func inClusterClient() (kubernetes.Interface, error) {
	cs, err := kubeclient.InCluster().Kubernetes()
	if err != nil {
		return nil, fmt.Errorf("in-cluster client (this command runs in a Pod): %w", err)
	}
	return cs, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
