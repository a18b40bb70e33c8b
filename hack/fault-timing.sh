#!/usr/bin/env bash
# Measures how long an environment takes to be green again after a fault:
# from `docker start` of a stopped node, and from a node restarted on another
# address (stopped, disconnected, its old address taken by placeholder
# containers, reconnected and started: what a Docker restart does to every
# node), to the first passing `meshctl check connectivity` —
# once with no command (the nodes heal themselves) and once running
# `meshctl up` right after the fault.
#
#   hack/fault-timing.sh [ENV] [NODE]
#
# ENV (default "default") must be up and connected with at least two
# clusters on one network; NODE defaults to ENV's cluster2 control plane.
# MESHCTL (default _output/bin/meshctl, what `make build` makes) is the binary; UP_ARGS are passed to
# `meshctl up` (give the same flags the environment was made with).
# CHECK_IMAGE is any image with sleep, for the address placeholders.
set -euo pipefail

env=${1:-default}
prefix=""
[ "$env" = default ] || prefix="$env-"
node=${2:-${prefix}cluster2-control-plane}
meshctl=${MESHCTL:-_output/bin/meshctl}
net=${KIND_EXPERIMENTAL_DOCKER_NETWORK:-kind}
image=${CHECK_IMAGE:-meshctl/busybox:latest}
read -r -a up_args <<<"${UP_ARGS:-}"

now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

green() { # wait for a passing check; print seconds since $1
	local t0=$1
	until "$meshctl" check connectivity --env "$env" >/dev/null 2>&1; do
		if (($(echo "$(since "$t0") > 600" | bc))); then
			echo "not green after 600 s" >&2
			return 1
		fi
		sleep 2
	done
	since "$t0"
}

# docker kill, not stop: a kind node's systemd ignores Docker's SIGTERM, so
# stop kills it anyway after its 10-s grace (see test/e2e/faults_test.go).
stop_start() {
	docker kill "$node" >/dev/null
	docker start "$node" >/dev/null
}

ip_of() { docker inspect --format "{{(index .NetworkSettings.Networks \"$net\").IPAddress}}" "$1"; }

# Docker gives a starting container the lowest free address: placeholders
# take them until one holds the node's old one.
move_ip() {
	local old i
	old=$(ip_of "$node")
	docker kill "$node" >/dev/null
	docker network disconnect "$net" "$node"
	for i in $(seq 0 63); do
		docker run -d --name "meshctl-placeholder-$i" --network "$net" "$image" sleep 3600 >/dev/null
		[ "$(ip_of "meshctl-placeholder-$i")" != "$old" ] || break
	done
	docker network connect "$net" "$node"
	docker start "$node" >/dev/null
	echo "  $node: $old -> $(ip_of "$node")" >&2
}

remove_placeholders() {
	docker ps -aq --filter name=meshctl-placeholder- | xargs -r docker rm -f >/dev/null
}
trap remove_placeholders EXIT

"$meshctl" check connectivity --env "$env" >/dev/null || { echo "environment $env is not green to start with" >&2; exit 1; }
for fault in stop_start move_ip; do
	for mode in none up; do
		echo "$fault, $mode:" >&2
		t0=$(now)
		$fault
		if [ "$mode" = up ]; then
			"$meshctl" up --env "$env" "${up_args[@]}" >/dev/null
		fi
		printf '%-10s %-5s %6.1f s to a green check connectivity\n' "$fault" "$mode" "$(green "$t0")"
		remove_placeholders
	done
done
