#!/usr/bin/env bash
# Where the CPU of one `meshctl up` goes among the processes that end while it
# runs (kubeadm, kubectl, docker, runc and its wrapper, jq, ...), inside the
# kind nodes included: BSD process accounting (Debian's acct: accton,
# dump-acct) is on for the run, then the records are summed per command.
# Daemons that outlive the run (kube-apiserver, etcd, containerd) are not in
# it: hack/create-timing.sh counts the whole machine.
#
#   hack/create-acct.sh [BINARY] -- UP_ARGS...
#   hack/create-acct.sh -- --clusters 1 --image meshctl/node:v1.34.4 --registry=false
#
# The environment "acct" is created and deleted; it must not exist beforehand.
# Needs root; process accounting is turned off again on exit.
set -euo pipefail

bin=_output/bin/meshctl
while (($#)); do
	case $1 in
	--) shift; break ;;
	*) bin=$1; shift ;;
	esac
done
command -v accton >/dev/null || { echo "create-acct.sh: accton not found (apt-get install acct)" >&2; exit 2; }

file=$(mktemp /tmp/create-acct.XXXXXX)
trap 'accton off >/dev/null 2>&1 || true; rm -f "$file"' EXIT
echo "$(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') load $(cut -d' ' -f1-3 /proc/loadavg): $bin up $*"
accton "$file" >/dev/null
out=$("$bin" up --env acct --install=false --remote-secrets=false --cacerts=false "$@" 2>&1) ||
	{ echo "$out" >&2; accton off >/dev/null; "$bin" down --env acct >/dev/null 2>&1 || true; exit 1; }
accton off >/dev/null
"$bin" down --env acct >/dev/null 2>&1
printf '%-16s %6s %8s\n' command runs CPU-s
# dump-acct: command|version|utime|stime|elapsed|... with times in ticks of 1/100 s
dump-acct "$file" | awk -F'|' '
	{ c = $1; gsub(/ /, "", c); n[c]++; cpu[c] += $3 + $4; total += $3 + $4 }
	END {
		for (c in n) if (cpu[c] >= 5) printf "%-16s %6d %8.2f\n", c, n[c], cpu[c] / 100
		printf "%-16s %6d %8.2f\n", "(all)", NR, total / 100
	}' | sort -k3 -g -r
