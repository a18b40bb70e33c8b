// Package image builds the dataplane image from meshctl's own binary and
// side-loads it into the nodes of kind clusters, so installing the mesh needs
// no registry and no image build toolchain:
//
//	img, err := image.New(image.WithBinary(path))   // default: this executable
//	err = img.Load(ctx, provider, image.Node{Cluster: "env-cluster1", Name: "env-cluster1-control-plane"})
//
// The image is one uncompressed layer holding the static binary as
// /usr/local/bin/meshctl (and the name meshctl-cni, under which the same
// binary is the CNI plugin), with meshctl as its entrypoint: every dataplane
// component is a subcommand (`meshctl dataplane install-cni|node-agent|proxy|signer`).
//
// The build is reproducible — fixed timestamps, fixed file modes — so the
// same binary always gives the same image ID; the charts put the ID in the
// Pod template, which makes re-installing an unchanged binary a no-op and a
// changed one a rolling update even under the same tag.
//
// The binary must be a static Linux executable (CGO_ENABLED=0), because the
// image has no C library; New refuses anything else, saying why.
package image
