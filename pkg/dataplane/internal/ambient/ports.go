package ambient

// The node proxy's ports in each pod's network namespace, as ztunnel's. One definition for the
// HBONE client and server (a CONNECT to one of the proxy's own ports would
// loop a tunnel back into the proxy), the proxy's listeners and the service
// model (where a node proxy or an east-west gateway takes HBONE).
const (
	PortOutbound = 15001
	PortInbound  = 15006
	PortHBONE    = 15008
)

// IsProxyPort reports whether port is one the proxy captures or serves
// HBONE on inside a pod's network namespace.
func IsProxyPort(port uint16) bool {
	return port == PortOutbound || port == PortInbound || port == PortHBONE
}
