// Package installcni is the install-cni container of the dataplane
// DaemonSet: it puts meshctl's CNI plugin into the node's CNI setup, keeps it
// there while the container runs, and takes it out again when it stops.
//
// It chains onto whatever primary CNI the cluster has (kindnet, calico, ...)
// instead of replacing it, choosing that config exactly as libcni would —
// the first valid .conf/.conflist/.json in sorted order — because that is
// the file the container runtime will actually use. Another CNI may rewrite
// its config at any time (kindnet does on start), so the file is watched and
// repaired; a throttle keeps two writers from spinning against each other.
//
// Every write is a temp file plus rename in the same directory, so the
// runtime never reads a half-written config or execs a half-copied binary.
package installcni
