// Package charts holds meshctl's Helm charts, embedded into the binary:
//
//	meshctl-cni        install-cni and the node agent (one DaemonSet)
//	meshctl-dataplane  the HBONE node proxy (DaemonSet) and the CSR signer
//
// Both take the same values (values.yaml and values.schema.json are
// identical in each, a test keeps them so): one cluster's values as
// `meshctl values render` prints them, plus the image meshctl side-loads.
package charts

import "embed"

// FS is the charts' files; each chart is a top-level directory. The all:
// prefix keeps templates/_helpers.tpl, which go:embed would skip.
//
//go:embed all:meshctl-cni all:meshctl-dataplane
var FS embed.FS

// Names are the charts, in install order: the CNI first, so the proxy's
// ZDS socket has an agent behind it as soon as it starts.
var Names = []string{"meshctl-cni", "meshctl-dataplane"}
