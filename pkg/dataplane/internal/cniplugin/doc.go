// Package cniplugin is meshctl's chained CNI plugin, configured by
// install-cni as the last entry of the node's primary conflist.
//
// It does no networking itself: on ADD for a pod that belongs in the mesh it
// asks the node agent, over a unix socket, to set up the pod's redirection
// and hand it to the proxy, and it fails the sandbox when the agent does not
// confirm within five seconds. Failing is the point: the kubelet retries the
// sandbox, whereas a pod that started without redirection would run outside
// the mesh, unnoticed. Pods that do not belong in the mesh (excluded
// namespaces, opted out, host network, not enrolled) pass straight through,
// so the agent being down only stalls meshed pods.
//
// As a chained plugin it passes the previous plugin's result through,
// converted to the config's CNI version (0.3.1 to 1.1.0).
package cniplugin
