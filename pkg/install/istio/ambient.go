package istio

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Istio's ambient charts, by directory under the charts directory.
const (
	CNIChart     = "istio-cni"
	ZtunnelChart = "ztunnel"
)

// AmbientReleases are Istio's charts in ambient mode, in install order, as
// Istio's ambient Helm guide installs and names them: Releases, then
// istio-cni (its node agent enrolls the pods and serves ZDS on
// /var/run/ztunnel/ztunnel.sock) and ztunnel, whose image is meshctl's
// proxy (Ztunnel). Each waits for the one before it: ztunnel's
// certificates come from istiod, and it connects to istio-cni.
var AmbientReleases = append(slices.Clone(Releases),
	Release{Name: "istio-cni", Chart: CNIChart},
	Release{Name: "ztunnel", Chart: ZtunnelChart},
)

// ZtunnelImageIDAnnotation on ztunnel's pods is the proxy image's config
// digest: a new binary under the same tag rolls them, as meshctl's own
// charts do with image.id.
const ZtunnelImageIDAnnotation = "meshctl.dev/image-id"

// Ztunnel is meshctl's proxy standing as ztunnel in one cluster: Istio's
// ztunnel chart, which keeps every name Istio's tools look for (DaemonSet
// ztunnel, pods app=ztunnel, service account ztunnel in the Istio
// namespace, which istiod's CA_TRUSTED_NODE_ACCOUNTS trusts to ask for
// other pods' identities; admin 15000, metrics 15020, readiness 15021),
// with its image replaced by meshctl's dataplane image. That image's
// meshctl-dataplane binary takes the chart's arguments (`proxy ztunnel`)
// and the environment the chart gives ztunnel: istiod's CA and XDS
// (CA_ADDRESS, XDS_ADDRESS: istiod.<ns>.svc:15012), its cluster and
// network; the ZDS socket is where the chart mounts it.
type Ztunnel struct {
	// Image is meshctl's dataplane image, ImageID its config digest.
	Image, ImageID string
	// MeshCIDRs are the pod subnets the proxy sends over HBONE beyond what
	// istiod tells it (its --mesh-cidrs).
	MeshCIDRs []string
}

func (z *Ztunnel) validate() error {
	if z == nil || z.Image == "" {
		return errors.New("ambient mode runs meshctl's proxy as ztunnel: no proxy image (Target.Ztunnel)")
	}
	return nil
}

// values are the ztunnel release's values from a cluster's: its global
// settings and profile as every Istio chart reads them, with the image,
// pull policy and environment replaced — the top-level image and env of
// the cluster's values are istiod's, which reads the same keys.
func (z *Ztunnel) values(cluster map[string]any) map[string]any {
	out := copyMap(cluster)
	out["image"] = z.Image
	// Side-loaded into kind nodes, or pushed where the nodes pull it once.
	out["imagePullPolicy"] = "IfNotPresent"
	env := map[string]any{}
	if len(z.MeshCIDRs) > 0 {
		env["MESHCTL_MESH_CIDRS"] = strings.Join(z.MeshCIDRs, ",")
	}
	if mc, ok := cluster["meshConfig"].(map[string]any); ok {
		if td, ok := mc["trustDomain"].(string); ok && td != "" {
			env["MESHCTL_TRUST_DOMAIN"] = td
		}
	}
	out["env"] = env
	ann := map[string]any{}
	if a, ok := cluster["podAnnotations"].(map[string]any); ok {
		maps.Copy(ann, a)
	}
	if z.ImageID != "" {
		ann[ZtunnelImageIDAnnotation] = z.ImageID
	}
	out["podAnnotations"] = ann
	if _, set := cluster["resources"]; !set {
		// ztunnel's chart asks 200m and 512Mi, sized for ztunnel at scale;
		// meshctl's proxy asks what its own chart does.
		out["resources"] = map[string]any{"requests": map[string]any{"cpu": "10m", "memory": "32Mi"}}
	}
	return out
}

// cniValues are the istio-cni release's values from a cluster's, with DNS
// capture off unless the values set it: istio-cni's in-pod rules would send
// every ambient pod's DNS (port 53) to ztunnel's DNS proxy on 15053, which
// meshctl's proxy does not serve, and no name would resolve. Istio's chart
// reads cni.ambient.dnsCapture (its cni section is copied over the top
// level), default true.
func (z *Ztunnel) cniValues(cluster map[string]any) map[string]any {
	out := copyMap(cluster)
	cni, _ := cluster["cni"].(map[string]any)
	cni = copyMap(cni)
	amb, _ := cni["ambient"].(map[string]any)
	amb = copyMap(amb)
	if _, set := amb["dnsCapture"]; !set {
		amb["dnsCapture"] = false
	}
	cni["ambient"] = amb
	out["cni"] = cni
	return out
}

// CNIImage is the image Istio's istio-cni chart runs with values v:
// <hub>/<image>:<tag>[-<variant>], each from the cni section (which the
// chart copies over the top level), else the top level, else global.
func CNIImage(v map[string]any) string { return imageRef(v, "cni", "install-cni") }

// requireAmbient checks that a cluster's values turn istiod's ambient
// support on, as the ambient values profile does (meshctl's
// values/profiles/ambient.yaml, `--profile ambient`): without it istiod
// never sends ztunnel a workload.
func requireAmbient(cluster string, v map[string]any) error {
	pilot, _ := v["pilot"].(map[string]any)
	env, _ := pilot["env"].(map[string]any)
	if fmt.Sprint(env["PILOT_ENABLE_AMBIENT"]) != "true" {
		return fmt.Errorf("cluster %q: ambient mode needs istiod's pilot.env.PILOT_ENABLE_AMBIENT=true: render the values with the ambient profile (--profile ambient)", cluster)
	}
	return nil
}
