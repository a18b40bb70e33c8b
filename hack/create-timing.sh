#!/usr/bin/env bash
# Times the creation of one kind cluster alone against N in parallel
# (`meshctl up`'s "Creating ..." step, nothing installed), interleaved so that
# a shared machine's load falls on both alike, and prints each pair's ratio.
#
#   hack/create-timing.sh [-n ROUNDS] [-c CLUSTERS] [BINARY] -- UP_ARGS...
#   hack/create-timing.sh -n 3 -c 3 -- --image meshctl/node:v1.34.4 --registry=false
#
# Environments ct1 and ctN are created and deleted each round; they must not
# exist beforehand. Each creation starts once the machine is quiet (settle).
set -euo pipefail

rounds=3
clusters=3
bin=_output/bin/meshctl
while (($#)); do
	case $1 in
	-n) rounds=$2; shift 2 ;;
	-c) clusters=$2; shift 2 ;;
	--) shift; break ;;
	*) bin=$1; shift ;;
	esac
done
up_args=("$@")

# shellcheck source=hack/timing-lib.sh
source "$(dirname "$0")/timing-lib.sh"

# create prints the creation step's seconds and the CPU-seconds the whole
# machine spent during the `up` (the clusters' containers, docker, meshctl).
create() {
	local n=$1 out j0 j1
	j0=$(busy_jiffies)
	out=$("$bin" up --env "ct$n" --clusters "$n" --install=false --remote-secrets=false --cacerts=false "${up_args[@]}" 2>&1) ||
		{ echo "$out" >&2; "$bin" down --env "ct$n" >/dev/null 2>&1 || true; exit 1; }
	j1=$(busy_jiffies)
	"$bin" down --env "ct$n" >/dev/null 2>&1
	echo "$(step_seconds Creating <<<"$out") $(((j1 - j0) / $(getconf CLK_TCK)))"
}

echo "$(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') one cluster vs $clusters in parallel"
for ((r = 1; r <= rounds; r++)); do
	b1=$(settle); l1=$(cut -d' ' -f1 /proc/loadavg); read -r one cpu1 < <(create 1)
	bN=$(settle); lN=$(cut -d' ' -f1 /proc/loadavg); read -r many cpuN < <(create "$clusters")
	awk -v r="$r" -v a="$one" -v b="$many" -v c="$clusters" -v l1="$l1" -v ln="$lN" -v b1="$b1" -v bn="$bN" -v c1="$cpu1" -v cn="$cpuN" \
		'BEGIN { printf "round %d: 1 cluster %.1f s, %d CPU-s (start: %s%% busy, load %s); %d clusters %.1f s, %d CPU-s (start: %s%% busy, load %s): %.2fx\n", r, a, c1, b1, l1, c, b, cn, bn, ln, b / a }'
done
