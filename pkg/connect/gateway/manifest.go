package gateway

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// MetalLB's version and images. The metallb/ directory holds upstream's
// config/manifests/metallb-native.yaml of this version, unchanged, with
// upstream's LICENSE (Apache-2.0) beside it.
const (
	MetalLBVersion = "v0.15.2"
	// MetalLBNamespace is where the manifest puts MetalLB.
	MetalLBNamespace = "metallb-system"
	// UpstreamControllerImage and UpstreamSpeakerImage are the images the
	// upstream manifest names; use them where quay.io is reachable.
	UpstreamControllerImage = "quay.io/metallb/controller:" + MetalLBVersion
	UpstreamSpeakerImage    = "quay.io/metallb/speaker:" + MetalLBVersion
	// DefaultControllerImage and DefaultSpeakerImage are built offline from
	// the same Go sources (hack/e2e, `make e2e-env`) and side-loaded into
	// the nodes: no container registry is needed.
	DefaultControllerImage = "meshctl/metallb-controller:" + MetalLBVersion
	DefaultSpeakerImage    = "meshctl/metallb-speaker:" + MetalLBVersion
)

//go:embed metallb/metallb-native.yaml
var metallbNative []byte

// MetalLBLicense is upstream's license, carried in the binary with the
// manifest it covers.
//
//go:embed metallb/LICENSE
var MetalLBLicense string

// MetalLB's validating webhook is not run. Its controller serves /metrics
// (what its readiness probe asks) only once the webhook's certificate,
// which it generates into a Secret at start, shows up in the Secret's
// volume in its own pod; the kubelet refreshes that volume at its next
// sync of the pod, which can be a minute away. Measured on an IPv6
// environment of 3 clusters: two controllers were killed by their
// liveness probe after 40 s and ready only when restarted, the step took
// 56.8 s against 10 s for the third cluster. The pools and advertisements
// are meshctl's own, checked before they are applied; the webhook only
// validated them again. The CRDs' conversion webhook (BGPPeer v1beta1 to
// v1beta2) stays as shipped: meshctl makes no BGPPeer, and a v1beta1 one
// made by hand fails loudly instead of being converted wrongly.
const (
	webhookConfigurationName = "metallb-webhook-configuration"
	webhookDisabledArg       = "--webhook-mode=disabled"
)

// metallbObjects parses the embedded manifest and points its two workloads
// at the given images. The speaker also gets --ignore-exclude-lb: kubeadm
// labels control-plane nodes node.kubernetes.io/exclude-from-external-load-balancers,
// and a kind cluster without workers has no other node to announce from.
// The controller gets --webhook-mode=disabled, and the webhook's
// configuration is left out (see webhookDisabledArg).
func metallbObjects(controllerImage, speakerImage string) ([]*unstructured.Unstructured, error) {
	all, err := decodeYAML(metallbNative)
	if err != nil {
		return nil, fmt.Errorf("embedded MetalLB manifest: %w", err)
	}
	objs := all[:0]
	for _, o := range all {
		if o.GetKind() != "ValidatingWebhookConfiguration" {
			objs = append(objs, o)
		}
	}
	var sawController, sawSpeaker bool
	for _, o := range objs {
		// Every object carries a field meshctl owns: an applied object with
		// no field of its own (the webhook Secret, empty: its webhook is off)
		// gets its empty managedFields entry dropped and re-added by every
		// apply, so a rerun would change it.
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[ManagedByLabel] = FieldManager
		o.SetLabels(labels)
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == "controller":
			sawController = true
			if err := setContainer(o, "controller", controllerImage, webhookDisabledArg); err != nil {
				return nil, err
			}
		case o.GetKind() == "DaemonSet" && o.GetName() == "speaker":
			sawSpeaker = true
			if err := setContainer(o, "speaker", speakerImage, "--ignore-exclude-lb"); err != nil {
				return nil, err
			}
		}
	}
	if !sawController || !sawSpeaker {
		return nil, errors.New("embedded MetalLB manifest: no controller Deployment or speaker DaemonSet")
	}
	return objs, nil
}

// MetalLB's readiness probes (GET /metrics) first look 10 s after a
// container starts and then every 10 s, so its pods turn Ready 10–20 s
// after they run although /metrics answers within a second or two; up
// waits for both the controller and the speakers before it applies the
// pool. Probing after 1 s and every 2 s lets up go on as soon as they
// serve. The liveness probes stay as shipped: a shorter one would restart
// a container that is only slow to start on a busy machine.
const (
	readinessDelaySeconds  = 1
	readinessPeriodSeconds = 2
)

// setContainer sets a container's image and readiness probe timing, and
// appends an argument it lacks.
func setContainer(o *unstructured.Unstructured, name, image, arg string) error {
	cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return fmt.Errorf("embedded MetalLB manifest: %s/%s: %w", o.GetKind(), o.GetName(), err)
	}
	for i, c := range cs {
		m, ok := c.(map[string]any)
		if !ok || m["name"] != name {
			continue
		}
		m["image"] = image
		if probe, ok := m["readinessProbe"].(map[string]any); ok {
			probe["initialDelaySeconds"] = float64(readinessDelaySeconds) // JSON numbers, as decoded
			probe["periodSeconds"] = float64(readinessPeriodSeconds)
		}
		if arg != "" {
			args, _, _ := unstructured.NestedStringSlice(m, "args")
			have := false
			for _, a := range args {
				have = have || a == arg
			}
			if !have {
				args = append(args, arg)
			}
			anyArgs := make([]any, len(args))
			for j, a := range args {
				anyArgs[j] = a
			}
			m["args"] = anyArgs
		}
		cs[i] = m
		return unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")
	}
	return fmt.Errorf("embedded MetalLB manifest: %s/%s has no container %q", o.GetKind(), o.GetName(), name)
}

// decodeYAML splits a multi-document YAML stream into objects, skipping
// empty documents. creationTimestamp: null (as controller-gen writes it) is
// dropped: it is server-owned.
func decodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("object %d: %w", len(out)+1, err)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetKind() == "" || o.GetAPIVersion() == "" {
			return nil, fmt.Errorf("object %d: no kind or apiVersion", len(out)+1)
		}
		unstructured.RemoveNestedField(o.Object, "metadata", "creationTimestamp")
		out = append(out, o)
	}
}
