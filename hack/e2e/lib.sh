# shellcheck shell=bash
# Common helpers and pinned versions for hack/e2e scripts. Source it; do not run it.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
K8S_STAGING_VERSION=${K8S_STAGING_VERSION:-v0.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.5}          # kubeadm v1.34 wants registry.k8s.io/etcd:3.6.5-0
COREDNS_VERSION=${COREDNS_VERSION:-v1.12.1}
PAUSE_VERSION=${PAUSE_VERSION:-3.10.1}
KIND_VERSION=${KIND_VERSION:-v0.33.0}
REGISTRY_VERSION=${REGISTRY_VERSION:-v3.0.0}
LPP_VERSION=${LPP_VERSION:-v0.0.30}   # rancher local-path-provisioner (kind's default storage)
METALLB_VERSION=${METALLB_VERSION:-v0.15.2} # = gateway.MetalLBVersion (pkg/connect/gateway)
DEBIAN_SUITE=${DEBIAN_SUITE:-bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

CACHE=${MESHCTL_CACHE:-/var/cache/meshctl}
# shellcheck disable=SC2034 # for the scripts that source this file
E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NODE_IMAGE=${NODE_IMAGE:-meshctl/node:${K8S_VERSION}}
REGISTRY_IMAGE=${REGISTRY_IMAGE:-meshctl/registry:${REGISTRY_VERSION}}
BUSYBOX_IMAGE=${BUSYBOX_IMAGE:-meshctl/busybox:latest}
METALLB_CONTROLLER_IMAGE=${METALLB_CONTROLLER_IMAGE:-meshctl/metallb-controller:${METALLB_VERSION}}
METALLB_SPEAKER_IMAGE=${METALLB_SPEAKER_IMAGE:-meshctl/metallb-speaker:${METALLB_VERSION}}

export GOFLAGS=${GOFLAGS:--buildvcs=false}
export GOTOOLCHAIN=local
export CGO_ENABLED=0

log() { printf '[e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf '[e2e] ERROR: %s\n' "$*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (docker engine, debootstrap, cgroup mounts)"; }

# phase NAME CMD... : run and record the duration into $CACHE/timings.log
phase() {
  local name=$1; shift
  local t0=$SECONDS
  log "phase $name: start"
  "$@"
  local dt=$((SECONDS - t0))
  log "phase $name: done in ${dt}s"
  mkdir -p "$CACHE"
  printf '%s %s %ss\n' "$(date -u +%FT%TZ)" "$name" "$dt" >>"$CACHE/timings.log"
}

kind_src() {
  local d
  d=$(go env GOMODCACHE)/sigs.k8s.io/kind@${KIND_VERSION}
  if [ ! -d "$d" ]; then
    (cd "$(mktemp -d)" && go mod download sigs.k8s.io/kind@"${KIND_VERSION}") >&2 || die "cannot download sigs.k8s.io/kind@${KIND_VERSION} from the Go module proxy"
  fi
  echo "$d"
}

# runc_wrapper: build hack/e2e/runcwrap (static, CGO_ENABLED=0 above) into the cache and
# print its path. The host's dockerd and the node image's containerd run the same binary.
runc_wrapper() {
  local out=$CACHE/bin/runc-nocap-sysresource
  mkdir -p "$CACHE/bin"
  go build -C "$E2E_DIR/runcwrap" -trimpath -ldflags=-s -o "$out.tmp" . >&2 || die "cannot build hack/e2e/runcwrap"
  mv "$out.tmp" "$out"
  echo "$out"
}
