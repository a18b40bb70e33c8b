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
// Pools are indexed by a cluster's position in its environment (mesh-name
// order), so they are stable across reruns; two multi-network environments
// on the same docker network would get the same pools (MetalLB answers ARP
// for both): give the second one its own network with
// KIND_EXPERIMENTAL_DOCKER_NETWORK.
//
// The gateway pods themselves come later, from the dataplane install: they
// must carry the labels the Service selects (see GatewaySelector).
package gateway
