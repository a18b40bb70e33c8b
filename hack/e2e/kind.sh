#!/usr/bin/env bash
# kind's own CLI (v0.33.0), built once from the Go module proxy into the cache; for debugging and
# for validating node images. meshctl itself links kind as a library.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
KIND=$CACHE/bin/kind-$KIND_VERSION
if [ ! -x "$KIND" ]; then
  mkdir -p "$CACHE/bin"
  GOBIN=$CACHE/bin/.kind-$KIND_VERSION go install "sigs.k8s.io/kind@$KIND_VERSION" >&2 \
    || die "cannot build sigs.k8s.io/kind@$KIND_VERSION from the Go module proxy"
  mv "$CACHE/bin/.kind-$KIND_VERSION/kind" "$KIND"; rmdir "$CACHE/bin/.kind-$KIND_VERSION"
fi
exec "$KIND" "$@"
