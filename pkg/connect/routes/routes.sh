#!/bin/sh
# meshctl's route reconciler (installed by `meshctl connect`/`up` on kind
# nodes): keeps this node's routes to the pods and services of peer clusters
# pointing at the peer nodes' current addresses. Docker's DNS on the kind
# network resolves node container names, so an address change (a Docker
# restart, a reconnected network) is followed within seconds.
#   routes.sh run     apply now and whenever a peer's address changes
#   routes.sh check   print each route not pointing where its peer is now
# The routes file has one "<destination CIDR> <peer node name>" per line.
routes=${MESHCTL_ROUTES:-/kind/meshctl/routes}

# addr NAME CIDR: NAME's current address in CIDR's family ("" if none).
addr() {
	case "$2" in
	*:*) getent ahostsv6 "$1" 2>/dev/null | while read -r a _; do
		case "$a" in ::ffff:*) ;; *) echo "$a"; break ;; esac
	done ;;
	*) getent ahostsv4 "$1" 2>/dev/null | while read -r a _; do echo "$a"; break; done ;;
	esac
}

# want: "<destination> <peer> <address or ?>" for each route.
want() {
	[ -f "$routes" ] || return 0
	while read -r dst name; do
		[ -n "$dst" ] || continue
		via=$(addr "$name" "$dst")
		echo "$dst $name ${via:-?}"
	done <"$routes"
}

case "${1:-run}" in
check)
	want | while read -r dst name via; do
		if [ "$via" = "?" ]; then
			echo "$dst: peer node $name does not resolve (is it running?)"
			continue
		fi
		fam=-4
		case "$dst" in *:*) fam=-6 ;; esac
		have=$(ip $fam route show "$dst" | sed -n 's/.* via \([^ ]*\).*/\1/p' | head -n 1)
		[ "$have" = "$via" ] || echo "$dst via ${have:-no route}, but $name is at $via"
	done
	;;
run)
	last=
	n=0
	while :; do
		batch=$(want | while read -r dst name via; do
			[ "$via" = "?" ] || echo "route replace $dst via $via"
		done)
		# Applied when an address changed, and once a minute anyway in
		# case something else removed a route.
		if [ -n "$batch" ] && { [ "$batch" != "$last" ] || [ "$n" -ge 12 ]; }; then
			if echo "$batch" | ip -force -batch -; then
				[ "$batch" = "$last" ] || echo "routes: $(echo "$batch" | tr '\n' ';')"
				last=$batch
			fi
			n=0
		fi
		n=$((n + 1))
		sleep "${MESHCTL_ROUTES_INTERVAL:-5}"
	done
	;;
*)
	echo "usage: $0 run|check" >&2
	exit 2
	;;
esac
