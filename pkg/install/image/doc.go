// Package image builds the dataplane image from a meshctl binary and
// side-loads it into the nodes of kind clusters, so installing the mesh needs
// no registry and no image build toolchain:
//
//	img, err := image.New()   // meshctl-dataplane next to this executable or on PATH, else this executable
//	err = img.Load(ctx, provider, image.Node{Cluster: "env-cluster1", Name: "env-cluster1-control-plane"})
//
// The image is one gzipped layer holding one static binary with the name
// meshctl-cni beside it (under which the same binary is the CNI plugin),
// the binary being its entrypoint. That binary is meshctl-dataplane (cmd/
// meshctl-dataplane, /usr/local/bin/meshctl-dataplane in the image) when
// meshctl finds it, or else meshctl itself (/usr/local/bin/meshctl), about
// three times the size. Both take the charts' arguments, `dataplane
// install-cni|node-agent|proxy|signer …`.
//
// The build is reproducible — fixed timestamps, fixed file modes — so the
// same binary always gives the same image ID; the charts put the ID in the
// Pod template, which makes re-installing an unchanged binary a no-op and a
// changed one a rolling update even under the same tag.
//
// The binary must be a static Linux executable (CGO_ENABLED=0), because the
// image has no C library; New refuses anything else, saying why.
package image
