#!/usr/bin/env bash
# make e2e-env: everything real kind clusters need on a machine without registry access.
# Idempotent and cached under $MESHCTL_CACHE (default /var/cache/meshctl); a warm rerun takes seconds.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_root
command -v go >/dev/null || die "go is not on PATH (Go >= 1.26 needed; /usr/local/go/bin)"
command -v jq >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null || die "apt-get install jq failed"; }
t0=$SECONDS
mkdir -p "$CACHE"
echo "--- e2e-env run $(date -u +%FT%TZ)" >>"$CACHE/timings.log"
phase docker-engine "$E2E_DIR/host-docker.sh"
# the rootfs download (network/dpkg bound) overlaps the Kubernetes compile (CPU bound)
"$E2E_DIR/build-rootfs.sh" >"$CACHE/rootfs.log" 2>&1 &
rootfs_pid=$!
phase k8s-build "$E2E_DIR/build-k8s.sh"
"$E2E_DIR/build-extras.sh"
phase rootfs-wait wait "$rootfs_pid" || { tail -20 "$CACHE/rootfs.log" >&2; die "node rootfs build failed (log: $CACHE/rootfs.log)"; }
phase images "$E2E_DIR/build-images.sh" >"$CACHE/images.out"
phase metallb "$E2E_DIR/build-metallb.sh" >>"$CACHE/images.out"
# Istio's pilot-discovery, install-cni, istio-cni and istioctl from the istio.io/istio version
# bench/go.mod pins, and the images meshctl/pilot and meshctl/install-cni FROM the busybox above
# Opt-in (MESHCTL_ISTIO=1) until the Istio e2e specs pass on kind: cold, this is
# about 8.5 CPU-minutes, and without the images those specs skip, saying so.
if [ "${MESHCTL_ISTIO:-0}" = 1 ]; then
  phase istio go -C "$E2E_DIR/../.." run ./hack/e2e/istio-build -cache "$CACHE" -gomod bench/go.mod >>"$CACHE/images.out"
fi
phase kind-cli "$E2E_DIR/kind.sh" --version >/dev/null
log "e2e-env ready in $((SECONDS - t0))s (phase timings: $CACHE/timings.log)"
cat "$CACHE/images.out"
