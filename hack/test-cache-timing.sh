#!/usr/bin/env bash
# Times, on an empty Go build cache, compiling every test package of the
# Makefile's unit/integration run and then the e2e suite's build of meshctl
# and meshctl-dataplane (static, grpcnotrace, as test/e2e builds them), once
# with the tests built as the Makefile builds them (TEST_ENV: CGO_ENABLED=0,
# -tags=grpcnotrace) and once with go's defaults (cgo on where gcc is found).
# It shows what the Makefile's TEST_ENV saves a cold run such as CI's.
#
#   hack/test-cache-timing.sh
#
# Each mode gets a GOCACHE of its own, emptied before and removed after; the
# machine's own cache is not touched.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t pkgs < <(go list ./... | grep -v /test/e2e)
flags="$(go env GOFLAGS)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "$(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') ${#pkgs[@]} packages, load $(cut -d' ' -f1 /proc/loadavg)"
for mode in makefile default; do
	export GOCACHE="$out/cache-$mode"
	t0=$SECONDS
	if [[ $mode == makefile ]]; then
		CGO_ENABLED=0 GOFLAGS="$flags -tags=grpcnotrace" go test -count=1 -run '^$' "${pkgs[@]}" >/dev/null
	else
		go test -count=1 -run '^$' "${pkgs[@]}" >/dev/null
	fi
	t1=$SECONDS
	CGO_ENABLED=0 go build -buildvcs=false -tags grpcnotrace -o "$out/bin-$mode/" ./cmd/meshctl ./cmd/meshctl-dataplane
	t2=$SECONDS
	echo "$mode: test packages compiled in $((t1 - t0)) s, then the e2e suite's build in $((t2 - t1)) s (load $(cut -d' ' -f1 /proc/loadavg))"
	rm -rf "$GOCACHE"
done
