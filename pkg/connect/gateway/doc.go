// Package gateway gives every cluster of a multi-network environment what
// its east-west gateway needs to be reachable from the other networks: all
// kind clusters share one docker network, so "networks" are logical, and a
// cluster on another network must be reached through an address on that
// docker network rather than through routes to its pods.
//
// Per cluster it installs MetalLB (L2 mode, the upstream metallb-native
// manifest embedded in the binary with its images made configurable), gives
// it an address pool carved from the kind docker network (disjoint across
// clusters, IPv4 and IPv6), and creates the east-west gateway Service
// (istio-system/istio-eastwestgateway, type LoadBalancer), whose external
// address is what meshNetworks renders for the cluster's network.
//
// Every kind cluster on the docker network shares it, whatever its
// environment, so pools are allocated machine-wide (pools.go, claim.go):
// each cluster's pools are recorded in meshctl's record of it on its
// control-plane node (model.Record.Pools), a rerun keeps them, and an
// environment gets only blocks that no cluster of another environment holds
// — two MetalLB speakers answering ARP for one address would break
// cross-network traffic. Claims are optimistic: written, read back, and
// withdrawn and retried if a concurrent meshctl claimed the same blocks.
// Blocks come back when their cluster is deleted. A full subnet is an error
// naming the environments that hold its blocks.
//
// The gateway pods themselves come later, from the dataplane install: they
// must carry the labels the Service selects (see GatewaySelector).
package gateway
