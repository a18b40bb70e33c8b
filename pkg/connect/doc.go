// Package connect joins the clusters of an environment: routes between
// clusters on one network, MetalLB and east-west gateways across networks,
// and remote secrets.
package connect
