package gateway

import (
	"net/netip"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The east-west gateway Service. Its name and namespace are what
// pkg/install/values renders as the gateway's registryServiceName.
const (
	GatewayName      = "istio-eastwestgateway"
	GatewayNamespace = "istio-system"
	// NetworkLabel marks the gateway (and istio-system) with its network,
	// as Istio expects.
	NetworkLabel = "topology.istio.io/network"
	// ManagedByLabel marks what meshctl applied.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// PoolName names the IPAddressPool and L2Advertisement meshctl owns.
	PoolName = "meshctl"
	// IstiodServiceName is the LoadBalancer Service through which a
	// primary's remotes reach its istiod (xDS, CA, webhooks), as Istio's
	// primary-remote guide exposes istiod through a gateway: the remotes'
	// global.remotePilotAddress.
	IstiodServiceName = "istiod-remotes"
)

// IstiodSelector is what the istiod Service selects: the labels Istio's
// istiod chart gives istiod's pods.
var IstiodSelector = map[string]string{"app": "istiod", "istio": "pilot"}

// Gateway ports, as Istio's east-west gateway exposes them.
const (
	PortHBONE   = 15008 // tcp-hbone: ambient's HBONE (mTLS HTTP/2 CONNECT)
	PortTLS     = 15443 // tls: sidecar mTLS passthrough (AUTO_PASSTHROUGH)
	PortIstiod  = 15012 // tcp-istiod: xDS and CA for remote clusters
	PortWebhook = 15017 // tcp-webhook: istiod's webhooks for remote clusters
	PortStatus  = 15021 // status-port: readiness
)

// GatewaySelector is what the gateway Service selects: the gateway pods the
// dataplane deploys must carry these labels, plus NetworkLabel set to their
// cluster's network (as Istio's east-west gateway pods do).
func GatewaySelector(network string) map[string]string {
	return map[string]string{
		"app":        "istio-eastwestgateway",
		"istio":      "eastwestgateway",
		NetworkLabel: network,
	}
}

// poolObjects are the MetalLB IPAddressPool and its L2Advertisement.
func poolObjects(pools []netip.Prefix) []*unstructured.Unstructured {
	addrs := make([]any, len(pools))
	for i, p := range pools {
		addrs[i] = p.String()
	}
	labels := map[string]any{ManagedByLabel: FieldManager}
	return []*unstructured.Unstructured{
		{Object: map[string]any{
			"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
			"metadata": map[string]any{"name": PoolName, "namespace": MetalLBNamespace, "labels": labels},
			"spec":     map[string]any{"addresses": addrs},
		}},
		{Object: map[string]any{
			"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
			"metadata": map[string]any{"name": PoolName, "namespace": MetalLBNamespace, "labels": labels},
			"spec":     map[string]any{"ipAddressPools": []any{PoolName}},
		}},
	}
}

// namespaceObject is istio-system, labelled with the network, which istiod
// reads as the cluster's network.
func namespaceObject(network string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": GatewayNamespace, "labels": map[string]any{NetworkLabel: network}},
	}}
}

func tcpPort(name string, n int64) map[string]any {
	return map[string]any{"name": name, "port": n, "targetPort": n, "protocol": "TCP"}
}

// istiodObjects are istio-system and the Service exposing istiod's 15012
// and 15017 on an address from the cluster's pool, which every node of the
// kind network reaches, whatever the clusters' networks.
func istiodObjects(network string) []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		namespaceObject(network),
		loadBalancer(IstiodServiceName, IstiodSelector, false,
			tcpPort("tcp-istiod", PortIstiod), tcpPort("tcp-webhook", PortWebhook)),
	}
}

// gatewayObjects are istio-system (labelled with the network, which istiod
// reads as the cluster's network) and the gateway Service.
func gatewayObjects(network string) []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		namespaceObject(network),
		loadBalancer(GatewayName, GatewaySelector(network), true,
			tcpPort("status-port", PortStatus),
			tcpPort("tls", PortTLS),
			tcpPort("tcp-istiod", PortIstiod),
			tcpPort("tcp-webhook", PortWebhook),
			tcpPort("tcp-hbone", PortHBONE)),
	}
}

// loadBalancer is a LoadBalancer Service in istio-system selecting
// selector, labelled as meshctl's (and with selector too, when
// selectorLabels, as Istio labels its gateway Service). It asks for both
// families where the cluster has both: IPv6-only peers must reach it too.
func loadBalancer(name string, selector map[string]string, selectorLabels bool, ports ...map[string]any) *unstructured.Unstructured {
	labels := map[string]any{ManagedByLabel: FieldManager}
	sel := map[string]any{}
	for k, v := range selector {
		sel[k] = v
		if selectorLabels {
			labels[k] = v
		}
	}
	ps := make([]any, len(ports))
	for i, p := range ports {
		ps[i] = p
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": GatewayNamespace, "labels": labels},
		"spec": map[string]any{
			"type":           "LoadBalancer",
			"ipFamilyPolicy": "PreferDualStack",
			"selector":       sel,
			"ports":          ps,
		},
	}}
}
