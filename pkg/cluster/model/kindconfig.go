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
		KubeadmConfigPatches:         slices.Concat(ecdsaKeyPatches, creationPatches),
		KubeadmConfigPatchesJSON6902: slices.Clone(creationPatchesJSON6902),
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
