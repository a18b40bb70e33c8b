#!/usr/bin/env bash
# Build the non-Kubernetes binaries the node image and the host need, from the Go module proxy,
# CGO_ENABLED=0, cached by version under $CACHE/bin/<name>-<version>:
#   etcd, coredns, registry (distribution v3), kindnetd (our stand-in, hack/e2e/gomod/k8s/kindnetd),
#   pause (static C from the k8s.io/kubernetes module download), local-path-provisioner (optional),
#   metallb (controller + speaker, for multi-network environments; build-metallb.sh asks for it).
# Usage: build-extras.sh [etcd|coredns|registry|kindnetd|pause|metallb ...]   (default: all but metallb)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BIN=$CACHE/bin
mkdir -p "$BIN"

# gomod_build OUT MODULE VERSION PKG [LDFLAGS]: build PKG of MODULE@VERSION in a wrapper module
gomod_build() {
  local out=$1 mod=$2 ver=$3 pkg=$4 ldflags=${5:-}
  [ -x "$out" ] && { log "cached: $out"; return 0; }
  local name; name=$(basename "$out")
  local src=$CACHE/src/$name
  mkdir -p "$src"
  # committed, tidied wrapper modules (hack/e2e/gomod/<name>-<version>) make the build reproducible
  if [ -f "$E2E_DIR/gomod/$name/go.mod" ] && [ ! -f "$src/go.sum" ]; then
    cp "$E2E_DIR/gomod/$name/"{go.mod,go.sum,tools.go} "$src/"
  fi
  if [ ! -f "$src/go.mod" ] || ! grep -q "$mod $ver" "$src/go.mod"; then
    rm -f "$src/go.mod" "$src/go.sum"
    (cd "$src" && go mod init "meshctl.local/build/$(basename "$src")" >/dev/null 2>&1 \
      && printf '//go:build tools\npackage tools\nimport _ "%s"\n' "$pkg" >tools.go \
      && go get "$mod@$ver" >/dev/null 2>&1 && go mod tidy >/dev/null 2>&1) \
      || die "cannot resolve $mod@$ver on the Go module proxy ($(go env GOPROXY))"
  fi
  log "building $pkg@$ver"
  (cd "$src" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg") || die "go build $pkg@$ver failed"
  mv "$out.tmp" "$out"
}

build_etcd() {
  gomod_build "$BIN/etcd-$ETCD_VERSION" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3 \
    "-X go.etcd.io/etcd/api/v3/version.GitSHA=meshctl"
  local v; v=$("$BIN/etcd-$ETCD_VERSION" --version) # (no pipe into grep -q: SIGPIPE + pipefail)
  [[ "$v" == *"etcd Version: ${ETCD_VERSION#v}"* ]] || die "etcd reports a wrong version: $v"
}
build_coredns() {
  gomod_build "$BIN/coredns-$COREDNS_VERSION" github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns \
    "-X github.com/coredns/coredns/coremain.GitCommit=meshctl"
}
build_registry() {
  gomod_build "$BIN/registry-$REGISTRY_VERSION" github.com/distribution/distribution/v3 "$REGISTRY_VERSION" \
    github.com/distribution/distribution/v3/cmd/registry \
    "-X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION"
}
build_kindnetd() {
  local h out
  h=$(cat "$E2E_DIR/gomod/k8s/kindnetd/"*.go | sha256sum | cut -c1-12)
  out=$BIN/kindnetd-$h
  [ -x "$out" ] && { log "cached: $out"; ln -sf "$(basename "$out")" "$BIN/kindnetd"; return 0; }
  # same module (and so the same compiled client-go) as the Kubernetes build
  (cd "$E2E_DIR/gomod/k8s" && go build -trimpath -ldflags "-s -w" -o "$out.tmp" ./kindnetd) || die "go build kindnetd failed"
  mv "$out.tmp" "$out"; ln -sf "$(basename "$out")" "$BIN/kindnetd"
}
build_pause() {
  local out=$BIN/pause-$PAUSE_VERSION
  [ -x "$out" ] && { log "cached: $out"; return 0; }
  local src
  src=$(cd "$E2E_DIR/gomod/k8s" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | jq -r .Dir)/build/pause/linux/pause.c
  [ -f "$src" ] || die "pause.c not found in the k8s.io/kubernetes module download"
  command -v gcc >/dev/null || { log "installing gcc for the static pause binary"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null || die "apt-get install gcc failed"; }
  gcc -Os -static -Wall -DVERSION="v$PAUSE_VERSION-meshctl" -o "$out.tmp" "$src" || die "gcc pause.c failed"
  strip "$out.tmp" 2>/dev/null || true
  mv "$out.tmp" "$out"
}

# MetalLB's controller and speaker from one wrapper module (gomod/metallb-<version>, committed)
# in one `go build`, so the two share their compiled dependencies. Native L2 mode only: the
# speaker's FRR helpers (frr-metrics, cp-tool, the reloader) are not built.
build_metallb() {
  local c=$BIN/metallb-controller-$METALLB_VERSION s=$BIN/metallb-speaker-$METALLB_VERSION
  [ -x "$c" ] && [ -x "$s" ] && { log "cached: $c $s"; return 0; }
  local mod=$E2E_DIR/gomod/metallb-$METALLB_VERSION src=$CACHE/src/metallb-$METALLB_VERSION
  [ -f "$mod/go.mod" ] || die "no wrapper module $mod for MetalLB $METALLB_VERSION"
  mkdir -p "$src"; cp "$mod/"{go.mod,go.sum,tools.go} "$src/"
  rm -rf "$src/out"; mkdir -p "$src/out"
  log "building go.universe.tf/metallb controller + speaker@$METALLB_VERSION"
  (cd "$src" && go build -trimpath -o "$src/out/" \
    -ldflags "-s -w -X go.universe.tf/metallb/internal/version.gitCommit=$METALLB_VERSION -X go.universe.tf/metallb/internal/version.gitBranch=meshctl-offline" \
    go.universe.tf/metallb/controller go.universe.tf/metallb/speaker) || die "go build go.universe.tf/metallb@$METALLB_VERSION failed"
  mv "$src/out/controller" "$c"; mv "$src/out/speaker" "$s"
}

build_local_path_provisioner() {
  # optional: kind's default StorageClass; a failure only warns
  if (gomod_build "$BIN/local-path-provisioner-$LPP_VERSION" github.com/rancher/local-path-provisioner "$LPP_VERSION" \
      github.com/rancher/local-path-provisioner "-X main.VERSION=$LPP_VERSION"); then
    ln -sf "local-path-provisioner-$LPP_VERSION" "$BIN/local-path-provisioner"
  else
    log "WARNING: local-path-provisioner not built; kind's default storage pods will not start (clusters work without)"
  fi
}

what=("$@")
if [ ${#what[@]} = 0 ]; then
  what=(pause kindnetd etcd coredns registry)
  # MESHCTL_E2E_STORAGE=0 skips kind's default storage (saves ~1/6 of a cold build)
  [ "${MESHCTL_E2E_STORAGE:-1}" = 0 ] || what+=(local-path-provisioner)
fi
for w in "${what[@]}"; do
  case "$w" in
    etcd|coredns|registry|kindnetd|pause|metallb) phase "build-$w" "build_$w" ;;
    local-path-provisioner) phase "build-$w" build_local_path_provisioner ;;
    *) die "unknown component $w" ;;
  esac
done
