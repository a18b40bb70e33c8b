package meshtest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/kubeclient"
)

// Cluster is one cluster of an Env, with clients for its API server.
type Cluster struct {
	// Name is the cluster's name in the mesh (Istio's clusterName);
	// KindName is the kind cluster's (the environment's prefix + Name).
	Name     string
	KindName string
	Network  string
	// Roles are primary, or remote (and config, for a remote that holds the
	// mesh config itself), as cluster.RolePrimary etc. name them.
	Roles              []string
	PrimaryClusterName string
	ConfigClusterName  string
	// Kubeconfig is the path of the cluster's host kubeconfig (mode 0600).
	Kubeconfig string

	Config *rest.Config
	Kube   kubernetes.Interface
	// Client is a controller-runtime client with client-go's scheme; add
	// your own types with Client.Scheme().AddKnownTypes or build another
	// client from Config.
	Client  client.Client
	Dynamic dynamic.Interface
	// Mapper maps kinds to resources for Apply; it rediscovers on a miss,
	// so kinds from CRDs applied during the suite are found.
	Mapper meta.ResettableRESTMapper

	kube *kubeclient.Getter // Kube's and Config's, for Exec
	env  *Env
}

// Is reports whether the cluster plays role (cluster.RolePrimary,
// cluster.RoleRemote, cluster.RoleConfig).
func (c *Cluster) Is(role string) bool { return slices.Contains(c.Roles, role) }

func (c *Cluster) String() string { return c.Name }

func newCluster(d clusterDesc) (*Cluster, error) {
	cfg, err := kubeclient.FromFile(d.Kubeconfig, "").RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("cluster %q: kubeconfig %s: %w", d.Name, d.Kubeconfig, err)
	}
	return newClusterFromConfig(d, cfg)
}

func newClusterFromConfig(d clusterDesc, cfg *rest.Config) (*Cluster, error) {
	// Suites hit every cluster at once from many goroutines: client-go's
	// default of 5 QPS would make a concurrent helper wait on itself.
	kg := kubeclient.FromConfig(cfg, kubeclient.WithRateLimit(50, 100))
	cfg, err := kg.RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", d.Name, err)
	}
	c := &Cluster{
		Name: d.Name, KindName: d.KindName, Network: d.Network, Roles: d.Roles,
		PrimaryClusterName: d.PrimaryClusterName, ConfigClusterName: d.ConfigClusterName,
		Kubeconfig: d.Kubeconfig, Config: cfg, kube: kg,
	}
	if c.Kube, err = kg.Kubernetes(); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", d.Name, err)
	}
	if c.Dynamic, err = kg.Dynamic(); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", d.Name, err)
	}
	disco, err := kg.Discovery()
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", d.Name, err)
	}
	c.Mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", d.Name, err)
	}
	// The controller-runtime client shares nothing with the mapper above:
	// its own lazy mapper discovers only the groups it is asked about. Its
	// logger is Ginkgo's, not controller-runtime's global one, which a
	// suite may set itself and which otherwise complains, with a stack
	// trace, that nobody set it.
	opts := client.Options{Scheme: scheme, Log: ginkgo.GinkgoLogr.WithName("controller-runtime").WithValues("cluster", d.Name)}
	if c.Client, err = client.New(cfg, opts); err != nil {
		return nil, fmt.Errorf("cluster %q: controller-runtime client: %w", d.Name, err)
	}
	return c, nil
}

// Clusters are the environment's clusters, in mesh-name order.
func (e *Env) Clusters() []*Cluster { return slices.Clone(e.clusters) }

// Primaries are the clusters that run a control plane.
func (e *Env) Primaries() []*Cluster {
	var out []*Cluster
	for _, c := range e.clusters {
		if c.Is(model.RolePrimary) {
			out = append(out, c)
		}
	}
	return out
}

// Cluster returns the cluster with the given mesh (or kind) name. An unknown
// name fails the spec with the names there are: never a nil pointer later.
func (e *Env) Cluster(name string) *Cluster {
	ginkgo.GinkgoHelper()
	c, err := e.lookup(name)
	if err != nil {
		ginkgo.Fail(err.Error())
	}
	return c
}

func (e *Env) lookup(name string) (*Cluster, error) {
	known := make([]string, len(e.clusters))
	for i, c := range e.clusters {
		if c.Name == name || c.KindName == name {
			return c, nil
		}
		known[i] = c.Name
	}
	return nil, fmt.Errorf("meshtest: environment %q has no cluster %q (it has %s)", e.desc.Env, name, strings.Join(known, ", "))
}
