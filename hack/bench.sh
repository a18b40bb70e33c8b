#!/usr/bin/env bash
# make bench-table: the HBONE benchmarks, N runs interleaved, summarized as the
# Markdown tables README's performance section quotes: min/median/max of every
# figure, and of the ratios taken within each run (HBONE vs TLS-only vs TLS
# through two plain proxies; meshctl vs Istio's Go peer in bench/).
#
#   N=5 hack/bench.sh                 # default: 5 runs, Go's default benchtime
#   N=2 BENCHTIME=200ms hack/bench.sh # a quick check that it all works
#   PEER=0 hack/bench.sh              # skip bench/ (Istio's Go peer)
#   UNITS=all hack/bench.sh           # every unit, ns/op and B/op too
#
# Each run is one `-count 1` pass of each package; the packages alternate
# which goes first, so a change in the machine's load falls on both. The raw
# `go test -bench` output stays in OUT (default _output/bench/<time>) for
# benchstat. The figures depend on the machine and its load: quote them with
# the header this prints.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-5}
BENCHTIME=${BENCHTIME:-}
BENCH=${BENCH:-.}        # which benchmarks of pkg/dataplane/internal/hbone
PEER_BENCH=${PEER_BENCH:-Peer} # which benchmarks of bench/
PEER=${PEER:-1}
# the figures README quotes; ns/op and B/op stay in the raw output
UNITS=${UNITS:-MB/s,cpu-µs/MiB,p50-µs,p99-µs,cpu-µs/op,tunnels/s,bytes/tunnel,stack-bytes/tunnel}
OUT=${OUT:-_output/bench/$(date -u +%Y%m%dT%H%M%SZ)}
GO=${GO:-go}

[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "bench.sh: N must be a positive number of runs, got '$N'" >&2; exit 2; }
[[ $PEER == 0 || $PEER == 1 ]] || { echo "bench.sh: PEER must be 0 or 1, got '$PEER'" >&2; exit 2; }

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
echo "bench.sh: building the test binaries; raw output in $OUT" >&2
"$GO" test -c -o "$OUT/hbone.test" ./pkg/dataplane/internal/hbone
if [[ $PEER == 1 ]]; then
  "$GO" -C bench test -c -o "$OUT/peer.test" .
fi

flags=(-test.run '^$' -test.benchmem -test.count 1)
if [[ -n $BENCHTIME ]]; then
  flags+=(-test.benchtime "$BENCHTIME")
fi

# run_pkg NAME DIR BENCH RUN: one pass of a package's benchmarks, from the
# package's directory as go test runs them, appended to OUT/NAME.txt
run_pkg() {
  local name=$1 dir=$2 bench=$3 run=$4
  echo "bench.sh: run $run/$N: $name" >&2
  {
    echo "run: $run"
    (cd "$dir" && "$OUT/$name.test" -test.bench "$bench" "${flags[@]}")
  } >>"$OUT/$name.txt"
}

start_date=$(date -u +%FT%TZ)
start_load=$(cut -d' ' -f1-3 /proc/loadavg)
for ((i = 1; i <= N; i++)); do
  if [[ $PEER == 0 ]]; then
    run_pkg hbone pkg/dataplane/internal/hbone "$BENCH" "$i"
  elif ((i % 2)); then
    run_pkg hbone pkg/dataplane/internal/hbone "$BENCH" "$i"
    run_pkg peer bench "$PEER_BENCH" "$i"
  else
    run_pkg peer bench "$PEER_BENCH" "$i"
    run_pkg hbone pkg/dataplane/internal/hbone "$BENCH" "$i"
  fi
done
end_load=$(cut -d' ' -f1-3 /proc/loadavg)

args=()
if [[ $UNITS != all ]]; then
  args+=(-units "$UNITS")
fi
args+=(-ratio HBONE/TLS13 -ratio HBONE/TLS13Proxied -ratio TLS13Proxied/TLS13 -ratio HBONE/HBONENoInline)
files=("$OUT/hbone.txt")
if [[ $PEER == 1 ]]; then
  args+=(-ratio meshctl/istio)
  files+=("$OUT/peer.txt")
fi
cpu=$(sed -n '/^cpu: /{s/^cpu: *//; s/ *$//; p;}' "$OUT/hbone.txt" | head -1)
{
  echo "hack/bench.sh, $start_date to $(date -u +%FT%TZ): N=$N runs, benchtime ${BENCHTIME:-1s (default)}"
  echo "commit $(git describe --always --dirty 2>/dev/null || echo unknown), $("$GO" env GOVERSION), $(nproc) CPUs${cpu:+ ($cpu)}"
  echo "load average (1, 5, 15 min): $start_load at the start, $end_load at the end"
  echo
  "$GO" -C hack/tools run ./benchtable "${args[@]}" "${files[@]}"
} | tee "$OUT/table.md"
