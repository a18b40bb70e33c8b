#!/usr/bin/env bash
# Times `meshctl up` on two networks — the "Installing MetalLB and east-west
# gateways" step and the whole up — for one or more binaries, interleaved
# round by round so that a shared machine's load falls on each alike.
#
#   hack/gateway-timing.sh [-n ROUNDS] BINARY... -- UP_ARGS...
#   hack/gateway-timing.sh -n 2 /tmp/meshctl-old /tmp/meshctl-new -- --image meshctl/node:v1.34.4 --registry=false
#
# Each run creates environment gt (2 clusters, 2 networks, no dataplane;
# UP_ARGS may override, e.g. --clusters 3 --ip-family ipv6) and
# deletes it; it must not exist beforehand. Each run starts once the machine
# is quiet (settle).
set -euo pipefail
# shellcheck source=hack/timing-lib.sh
source "$(dirname "$0")/timing-lib.sh"

rounds=2
bins=()
while (($#)); do
	case $1 in
	-n) rounds=$2; shift 2 ;;
	--) shift; break ;;
	*) bins+=("$1"); shift ;;
	esac
done
up_args=("$@")
((${#bins[@]})) || bins=(_output/bin/meshctl)

# run BINARY prints the MetalLB step's seconds and the whole up's.
run() {
	local bin=$1 out start
	start=$(date +%s.%N)
	out=$("$bin" up --env gt --clusters 2 --networks 2 --install=false "${up_args[@]}" 2>&1) ||
		{ echo "$out" >&2; "$bin" down --env gt >/dev/null 2>&1 || true; exit 1; }
	echo "$(step_seconds "Installing MetalLB" <<<"$out") $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')"
	"$bin" down --env gt >/dev/null 2>&1
}

echo "$(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') up --clusters 2 --networks 2 --install=false ${up_args[*]}, $rounds round(s)"
for ((r = 1; r <= rounds; r++)); do
	for bin in "${bins[@]}"; do
		busy=$(settle)
		load=$(cut -d' ' -f1 /proc/loadavg)
		read -r metallb total < <(run "$bin")
		printf 'round %d: %s: MetalLB and gateways %.1f s, whole up %.1f s (start: %s%% busy, load %s)\n' "$r" "$bin" "$metallb" "$total" "$busy" "$load"
	done
done
