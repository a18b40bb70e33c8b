#!/usr/bin/env bash
# Times no-op reruns of `meshctl up` step by step: how long each status line
# takes (min/median/max over the runs) and how many docker commands and
# Kubernetes API requests it makes (median), from MESHCTL_TRACE (see
# internal/trace) and a docker wrapper put first on PATH that appends each
# docker command, the kind library's included, to the same trace.
#
#   hack/noop-timing.sh [-n RUNS] [-k] [BINARY...] -- UP_ARGS...
#   hack/noop-timing.sh -n 5 /tmp/meshctl-main _output/bin/meshctl -- --env noop --clusters 3 --registry=false
#
# The environment must already be up as UP_ARGS say (every run is then a
# no-op). Several binaries run interleaved (run 1 of each, then run 2 of
# each, ...), so that the load of a shared machine falls on all alike;
# compare their counts, and their times as ratios. BINARY defaults to
# _output/bin/meshctl. -k keeps the traces (their directory is printed).
set -euo pipefail

runs=5
keep=false
bins=()
while (($#)); do
	case $1 in
	-n) runs=$2; shift 2 ;;
	-k) keep=true; shift ;;
	--) shift; break ;;
	*) bins+=("$1"); shift ;;
	esac
done
((${#bins[@]})) || bins=(_output/bin/meshctl)
up_args=("$@")

dir=$(mktemp -d)
$keep || trap 'rm -rf "$dir"' EXIT
real=$(command -v docker)
mkdir "$dir/bin"
cat >"$dir/bin/docker" <<SHIM
#!/bin/sh
start=\$(date +%s%6N)
"$real" "\$@"
rc=\$?
end=\$(date +%s%6N)
[ -z "\$MESHCTL_TRACE" ] || echo "\$start \$((end - start)) docker \$1 \$2" >>"\$MESHCTL_TRACE"
exit \$rc
SHIM
chmod +x "$dir/bin/docker"

for ((i = 1; i <= runs; i++)); do
	for j in "${!bins[@]}"; do
		t="$dir/b$j-r$i.trace"
		start=$(date +%s%6N)
		if ! MESHCTL_TRACE=$t PATH="$dir/bin:$PATH" "${bins[$j]}" up "${up_args[@]}" >"$dir/b$j-r$i.out" 2>&1; then
			# Left out of the table; a loaded machine times requests out.
			echo "run $i of ${bins[$j]} failed (left out):" >&2
			tail -3 "$dir/b$j-r$i.out" >&2
			mv "$t" "$t.failed"
			continue
		fi
		end=$(date +%s%6N)
		echo "$start $((end - start)) total" >>"$t"
		printf '.' >&2
	done
done
echo >&2

# One trace → "step<TAB>seconds<TAB>docker commands<TAB>kube requests" lines,
# in the order of the steps; what precedes the first status line is "(start)".
per_step() {
	sort -n -k1,1 "$1" | awk '
		function close_step(t) {
			if (cur != "") printf "%s\t%.3f\t%d\t%d\n", cur, (t - since) / 1e6, nd, nk
			cur = ""; nd = 0; nk = 0
		}
		$3 == "total" { total = $2; next }
		!started { started = 1; cur = "(start)"; since = $1 }
		$3 == "step" || $3 == "end" {
			close_step($1)
			if ($3 == "step") { cur = $0; sub(/^[^ ]+ [^ ]+ step /, "", cur); since = $1 }
			next
		}
		$3 == "docker" { nd++; td++ }
		$3 == "kube" { nk++; tk++ }
		END { printf "TOTAL\t%.3f\t%d\t%d\n", total / 1e6, td, tk }
	'
}

for j in "${!bins[@]}"; do
	ok=$(find "$dir" -name "b$j-r*.trace" | wc -l)
	echo "== ${bins[$j]} ($ok of $runs runs succeeded)"
	for ((i = 1; i <= runs; i++)); do
		[ ! -f "$dir/b$j-r$i.trace" ] || per_step "$dir/b$j-r$i.trace"
	done | awk -F'\t' '
		!($1 in seen) { seen[$1] = ++n; order[n] = $1 }
		{ k = seen[$1]; c[k]++; t[k, c[k]] = $2; d[k, c[k]] = $3; q[k, c[k]] = $4 }
		function med(a, k, m,   i, j, v, x) {
			for (i = 1; i <= m; i++) v[i] = a[k, i]
			for (i = 2; i <= m; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
			lo = v[1]; hi = v[m]
			return (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
		}
		END {
			printf "%-70s %7s %7s %7s %7s %7s\n", "STEP", "MIN s", "MED s", "MAX s", "DOCKER", "KUBE"
			for (k = 1; k <= n; k++) {
				m = c[k]; dm = med(d, k, m); qm = med(q, k, m); tm = med(t, k, m)
				printf "%-70s %7.2f %7.2f %7.2f %7d %7d\n", substr(order[k], 1, 70), lo, tm, hi, dm, qm
			}
		}'
done
$keep && echo "traces in $dir" >&2
exit 0
