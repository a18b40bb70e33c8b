#!/usr/bin/env bash
# MetalLB for multi-network environments, without pulling anything: the controller and the
# speaker built from go.universe.tf/metallb (build-extras.sh metallb) and `docker import`ed as
#   $METALLB_CONTROLLER_IMAGE  (meshctl/metallb-controller:<version>, ENTRYPOINT /controller)
#   $METALLB_SPEAKER_IMAGE     (meshctl/metallb-speaker:<version>,    ENTRYPOINT /speaker)
# laid out as upstream's distroless images (binary at /, upstream LICENSE at /LICENSE), with the
# same LABEL meshctl.key scheme as build-images.sh: a rerun with unchanged binaries only checks.
# They are NOT preloaded into the node image (that would rebuild it for every environment);
# `meshctl up/connect` side-loads them into the clusters that need them.
# A separate script on purpose: build-images.sh hashes itself into the node image's cache key.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_root

"$E2E_DIR/build-extras.sh" metallb
B=$CACHE/bin
LICENSE=$(cd "$E2E_DIR/gomod/metallb-$METALLB_VERSION" && go mod download -json "go.universe.tf/metallb@$METALLB_VERSION" | jq -r .Dir)/LICENSE
[ -f "$LICENSE" ] || die "MetalLB's LICENSE not found in the go.universe.tf/metallb@$METALLB_VERSION module download"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# metallb_image IMAGE BINARY NAME: a single-layer image holding /NAME and /LICENSE
metallb_image() {
  local image=$1 bin=$2 name=$3 key
  key=$( (sha256sum <"$bin"; sha256sum <"$LICENSE"; echo "$name") | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{ index .Config.Labels "meshctl.key" }}' "$image" 2>/dev/null || true)" = "$key" ]; then
    log "image cached: $image"; return 0
  fi
  local d=$WORK/$name
  mkdir -p "$d"/{etc,tmp}
  chmod 1777 "$d/tmp"
  # the controller runs as 65534 (runAsNonRoot); the speaker as root
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$d/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$d/etc/group"
  install -m 0755 "$bin" "$d/$name"
  install -m 0644 "$LICENSE" "$d/LICENSE"
  tar -C "$d" --numeric-owner --owner=0 --group=0 -c . | docker import \
    --change "LABEL meshctl.key=$key" --change "LABEL org.opencontainers.image.licenses=Apache-2.0" \
    --change "LABEL org.opencontainers.image.source=https://github.com/metallb/metallb" \
    --change "ENTRYPOINT [\"/$name\"]" - "$image" >/dev/null || die "docker import $image failed"
  log "image built: $image"
}

metallb_image "$METALLB_CONTROLLER_IMAGE" "$B/metallb-controller-$METALLB_VERSION" controller
metallb_image "$METALLB_SPEAKER_IMAGE" "$B/metallb-speaker-$METALLB_VERSION" speaker
docker image prune -f --filter label=meshctl.key >/dev/null 2>&1 || true
echo "METALLB_CONTROLLER_IMAGE=$METALLB_CONTROLLER_IMAGE"
echo "METALLB_SPEAKER_IMAGE=$METALLB_SPEAKER_IMAGE"
