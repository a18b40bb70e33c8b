package model

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

// Node labels meshctl puts on every node, so that tools inside the cluster
// (and `kubectl get nodes -L`) can tell which environment and network a node
// belongs to. topology.istio.io/network is the label Istio itself reads.
const (
	LabelEnv     = "meshctl.dev/env"
	LabelCluster = "meshctl.dev/cluster"
	LabelNetwork = "topology.istio.io/network"
)

// RegistryCertsDir is where containerd looks for per-registry hosts.toml
// files once config_path points at it.
const RegistryCertsDir = "/etc/containerd/certs.d"

// containerdRegistryPatch turns on containerd's per-host registry config
// (hosts.toml), the mechanism kind's local-registry guide uses. It is in
// containerd's config v2 syntax, which kind's node images use.
const containerdRegistryPatch = `[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "` + RegistryCertsDir + `"
`

// ecdsaKeyPatches make kubeadm create every key of the cluster (CAs,
// serving and client certificates, the service-account signing key, the
// kubeconfigs' client keys) as ECDSA P-256 instead of RSA 2048. kubeadm init
// creates sixteen of them one after another, on the creation's critical
// path; Go takes 60-100 ms of CPU for one RSA 2048 key on these machines and
// well under a millisecond for a P-256 key, and every TLS handshake with the
// API server then signs with P-256 too. kind writes a v1beta3 kubeadm config
// for Kubernetes before v1.36, where the choice is kubeadm's PublicKeysECDSA
// feature gate, and v1beta4 from v1.36, where it is encryptionAlgorithm; kind
// applies a patch only to the config whose apiVersion it names.
var ecdsaKeyPatches = []string{
	`apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
featureGates:
  PublicKeysECDSA: true
`,
	`apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
encryptionAlgorithm: ECDSA-P256
`,
}

// Creation-path patches (kubeadm v1beta3 as merge patches, v1beta4 as JSON
// patches, since its extraArgs and skipPhases are lists a merge patch would
// replace, kind's own entries with them).
//
// kube-controller-manager's client allows 20 requests/s (burst 30), and
// with kubeadm's --use-service-account-credentials it makes three requests
// for each of its ~40 controllers as it starts them one after another (get
// and create the controller's ServiceAccount, request its token); its
// informers start only once the last controller has: past the burst, 50 ms
// a request put ~6 s between the lease and the first DaemonSet pod (kindnet,
// which the node waits for to turn Ready) on every cluster created.
//
// kubeadm init's kubelet-finalize/enable-client-cert-rotation rewrites
// kubelet.conf to a rotating client certificate file and restarts the
// kubelet a few seconds after kubelet-start started it: a second kubelet
// start (≈ 0.5 CPU-s) while the control plane comes up. The kubelet keeps
// the client certificate kubeadm embedded, valid for a year, more than an
// environment lives.
const controllerManagerQPS, controllerManagerBurst = "200", "400"

var creationPatches = []string{
	`apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
controllerManager:
  extraArgs:
    kube-api-qps: "` + controllerManagerQPS + `"
    kube-api-burst: "` + controllerManagerBurst + `"
`,
}

const skipKubeletFinalize = `- op: add
  path: /skipPhases/-
  value: kubelet-finalize/enable-client-cert-rotation
`

var creationPatchesJSON6902 = []v1alpha4.PatchJSON6902{
	{Group: "kubeadm.k8s.io", Version: "v1beta3", Kind: "InitConfiguration", Patch: skipKubeletFinalize},
	{Group: "kubeadm.k8s.io", Version: "v1beta4", Kind: "InitConfiguration", Patch: skipKubeletFinalize},
	{Group: "kubeadm.k8s.io", Version: "v1beta4", Kind: "ClusterConfiguration", Patch: `- op: add
  path: /controllerManager/extraArgs/-
  value: {name: kube-api-qps, value: "` + controllerManagerQPS + `"}
- op: add
  path: /controllerManager/extraArgs/-
  value: {name: kube-api-burst, value: "` + controllerManagerBurst + `"}
`},
}

// Control-plane CPU patches. Creation is CPU-bound when several clusters
// start at once on a small machine; these cut what etcd, the
// kube-controller-manager and the kube-scheduler spend starting, and change
// no API and nothing a workload sees. Measured with etcd v3.6.5 and
// Kubernetes v1.34.4 (the e2e builds) started on the host's loopback with
// kubeadm's flags, CPU-seconds from /proc/<pid>/stat over their first 20 s,
// 10 starts of each variant interleaved, fresh etcd data each time, a quiet
// 2-vCPU machine (2026-12-07, load 0.2-2.4), medians (min-max): etcd +
// API server + controller manager + scheduler 5.90 (5.29-7.83) → 5.63
// (5.09-6.79); etcd 1.05 → 0.96, controller manager 0.91 → 0.89 (0.42 →
// 0.33 by the time the API server is ready), scheduler 0.53 → 0.37; the API
// server's own 3.5 s did not move.
//
// kubeadm gives the kube-controller-manager and the kube-scheduler no
// serving certificate, so each makes a self-signed one for its 10257/10259
// port (health checks, metrics) at start: two RSA 2048 keys (its CA's and
// the certificate's), ≈ 60 ms of CPU each here, in its main goroutine
// before it connects to the API server; 22% of the controller manager's and
// 20% of the scheduler's CPU in their first 20 s (perf, one run; the in-memory
// loopback certificate each also makes, two more keys, no flag avoids).
// kubeadm's API server certificate is valid for localhost and the loopback
// address (kind adds both to its names); its key is already in the
// controller manager's pod (/etc/kubernetes/pki, with the CA's key, which
// signs any certificate), and the scheduler gets the two files mounted
// read-only. The probes and kubeadm's control-plane checks do not verify
// the certificate; a client that trusts the cluster CA now can.
//
// etcd serves gRPC and its HTTP endpoints on one TLS port, and then runs
// gRPC through Go's net/http server (etcd warns at start: "Running http and
// grpc server on single port"), slower than grpc-go's own transport.
// --listen-client-http-urls moves the HTTP endpoints (/health, /version,
// the JSON gateway; kubeadm's probes use the metrics port, 2381) to a port
// of their own on loopback, with the same TLS and client-certificate check,
// and leaves 2379 to gRPC, which the API server, kubeadm and etcdctl use.
const (
	servingCertFile  = "/etc/kubernetes/pki/apiserver.crt"
	servingKeyFile   = "/etc/kubernetes/pki/apiserver.key"
	etcdHTTPPort     = "2382"
	servingCertNames = `    tls-cert-file: ` + servingCertFile + `
    tls-private-key-file: ` + servingKeyFile + `
`
)

// etcdHTTPURL is the loopback URL etcd serves its HTTP endpoints on, in the
// address family kubeadm gives etcd's loopback client URL.
func etcdHTTPURL(family string) string {
	host := "127.0.0.1"
	if family == IPv6 {
		host = "[::1]"
	}
	return "https://" + host + ":" + etcdHTTPPort
}

func controlPlanePatch(family string) string {
	return `apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
etcd:
  local:
    extraArgs:
      listen-client-http-urls: ` + etcdHTTPURL(family) + `
controllerManager:
  extraArgs:
` + servingCertNames + `scheduler:
  extraArgs:
` + servingCertNames + `  extraVolumes:
  - name: meshctl-serving-cert
    hostPath: ` + servingCertFile + `
    mountPath: ` + servingCertFile + `
    readOnly: true
    pathType: File
  - name: meshctl-serving-key
    hostPath: ` + servingKeyFile + `
    mountPath: ` + servingKeyFile + `
    readOnly: true
    pathType: File
`
}

// controlPlanePatchJSON6902 is controlPlanePatch for kubeadm v1beta4 (kind
// uses it from Kubernetes v1.36). kind's v1beta4 template has no etcd
// section (added whole) and the controller manager's extraArgs list
// (appended to); its scheduler extraArgs is null unless kind adds an entry
// (IPv6, feature gates), and a JSON patch cannot append to null nor make a
// list only where there is none, so the scheduler keeps its self-signed
// certificate there.
func controlPlanePatchJSON6902(family string) v1alpha4.PatchJSON6902 {
	return v1alpha4.PatchJSON6902{Group: "kubeadm.k8s.io", Version: "v1beta4", Kind: "ClusterConfiguration", Patch: `- op: add
  path: /etcd
  value: {local: {extraArgs: [{name: listen-client-http-urls, value: "` + etcdHTTPURL(family) + `"}]}}
- op: add
  path: /controllerManager/extraArgs/-
  value: {name: tls-cert-file, value: ` + servingCertFile + `}
- op: add
  path: /controllerManager/extraArgs/-
  value: {name: tls-private-key-file, value: ` + servingKeyFile + `}
`}
}

// KindConfig renders the kind v1alpha4 config that creates this cluster.
func (p *Plan) KindConfig(c ClusterPlan) *v1alpha4.Cluster {
	labels := map[string]string{
		LabelEnv:     p.Env,
		LabelCluster: c.Name,
		LabelNetwork: c.Network,
	}
	cfg := &v1alpha4.Cluster{
		TypeMeta: v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Name:     c.KindName,
		Networking: v1alpha4.Networking{
			IPFamily:      v1alpha4.ClusterIPFamily(c.IPFamily),
			PodSubnet:     strings.Join(c.PodSubnets, ","),
			ServiceSubnet: strings.Join(c.ServiceSubnets, ","),
		},
		KubeadmConfigPatches:         slices.Concat(ecdsaKeyPatches, creationPatches, []string{controlPlanePatch(c.IPFamily)}),
		KubeadmConfigPatchesJSON6902: append(slices.Clone(creationPatchesJSON6902), controlPlanePatchJSON6902(c.IPFamily)),
	}
	add := func(role v1alpha4.NodeRole, n int) {
		for range n {
			cfg.Nodes = append(cfg.Nodes, v1alpha4.Node{Role: role, Image: c.Image, Labels: labels})
		}
	}
	add(v1alpha4.ControlPlaneRole, c.ControlPlanes)
	add(v1alpha4.WorkerRole, c.Workers)
	if p.Registry.Enabled {
		cfg.ContainerdConfigPatches = []string{containerdRegistryPatch}
	}
	return cfg
}

// KindConfigYAML is KindConfig as kind reads it from a file.
func (p *Plan) KindConfigYAML(c ClusterPlan) ([]byte, error) {
	out, err := yaml.Marshal(p.KindConfig(c))
	if err != nil {
		return nil, fmt.Errorf("rendering kind config for %s: %w", c.Name, err)
	}
	return out, nil
}

// InternalAPIServer is a kind cluster's API server by container name on
// the kind network, as kind's own internal kubeconfig names it: the
// control-plane node, or kind's load balancer in front of several. Docker's
// DNS resolves it from every container on the network (pods included), and
// kubeadm puts the node name and the control-plane endpoint in the API
// server certificate, so it outlives a change of the node's address.
func InternalAPIServer(c ClusterPlan) string {
	host := c.KindName + "-control-plane"
	if c.ControlPlanes > 1 {
		host = c.KindName + "-external-load-balancer"
	}
	return "https://" + net.JoinHostPort(host, "6443")
}
