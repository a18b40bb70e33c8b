// Package podnet runs socket operations inside a pod's network namespace, so
// one node proxy can own listeners and connections in many pods at once (the
// in-pod mode of Istio ambient): the socket is created with the calling OS
// thread switched into the pod's namespace, and keeps belonging to that
// namespace after the thread switches back.
package podnet
