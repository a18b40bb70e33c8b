// Package dataplanecmd is the command line of the dataplane image's entry
// points — install-cni, node-agent, proxy, gateway and signer — shared by
// the small meshctl-dataplane binary the image is built from and by
// meshctl's hidden `meshctl dataplane …` commands, both through package
// dataplane's Main, Commands and Run, so both parse the same flags the same
// way.
//
// It uses the standard library's flag package, not cobra and viper: the
// dataplane binary runs on every node, four processes each, and every
// package it links is image size and resident memory there. Every flag can
// also be set as MESHCTL_<FLAG> (MESHCTL_TRUST_DOMAIN=example.org); a flag on
// the command line wins. The two values a Pod learns from the downward API
// are read from NODE_NAME and POD_NAMESPACE, the names upstream's charts use.
package dataplanecmd
