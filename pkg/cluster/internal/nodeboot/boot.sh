#!/bin/sh
# meshctl's boot steps for a kind node (installed by `meshctl up` when it
# creates the cluster; meshctl-boot.service runs them at every start of the
# node container, before the kubelet). What a restarted node needs that
# kind's own start does not do:
#
#   boot.sh rules POD=SVC...
#       A pod's packet to a Service address that kube-proxy has no rule for
#       yet (the node just started) is refused at once instead of routed out
#       of the node. Without it, a pod that starts before kube-proxy's first
#       sync (CoreDNS, after a restart) sends its first SYN to the API
#       server's Service address out of the node; conntrack remembers that
#       connection un-NATed, so the SYN's retries are not rewritten when
#       kube-proxy's rules arrive and the client waits for its 30-s dial
#       timeout. With the rule it gets "unreachable" and dials again.
#       Packets kube-proxy rewrites are routed to their endpoint, not to the
#       Service address: the rule never sees them. Host processes (from the
#       node's address, not a pod's) are not matched.
#   boot.sh leases
#       On a control-plane node: release the leader leases (the controller
#       manager's, the scheduler's) that this node's previous start held.
#       Their holders died with the container, but a new candidate waits a
#       whole lease duration (15 s) of the record not changing before it
#       takes over; a lease with no holder it takes at its next try (2 s).
#       Only leases held by this host and last renewed before this start
#       are released, each on the condition that it did not change since it
#       was read (its resourceVersion).
set -u
pref=${MESHCTL_RULE_PREF:-31000}

case "${1:-}" in
rules)
	shift
	status=0
	for pair in "$@"; do
		pod=${pair%%=*}
		svc=${pair#*=}
		fam=-4
		case "$svc" in *:*) fam=-6 ;; esac
		# Again at every start of the unit: the same rule once.
		while ip "$fam" rule del pref "$pref" from "$pod" to "$svc" unreachable 2>/dev/null; do :; done
		ip "$fam" rule add pref "$pref" from "$pod" to "$svc" unreachable || status=1
	done
	exit "$status"
	;;
leases)
	kc=${MESHCTL_KUBECONFIG:-/etc/kubernetes/admin.conf}
	[ -f "$kc" ] || exit 0 # a worker: no control plane here
	# This runs before the kubelet starts this start's control plane: a
	# lease renewed before now was renewed by a process of an earlier start.
	boot=${MESHCTL_BOOT:-$(date -u +%s)}
	host=${MESHCTL_HOSTNAME:-$(hostname)}
	k() { kubectl --kubeconfig "$kc" --request-timeout 5s "$@"; }
	i=0
	until k get --raw /readyz >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -ge 300 ]; then
			echo "leases: the API server was not ready within 300 s; left as they are"
			exit 1
		fi
		sleep 1
	done
	for lease in kube-controller-manager kube-scheduler; do
		# shellcheck disable=SC2046 # three words: holder, renewal, version
		set -- $(k -n kube-system get lease "$lease" -o jsonpath='{.spec.holderIdentity} {.spec.renewTime} {.metadata.resourceVersion}' 2>/dev/null)
		[ "$#" -eq 3 ] || continue
		case "$1" in "${host}_"*) ;; *) continue ;; esac
		renewed=$(date -u -d "$2" +%s 2>/dev/null) || continue
		[ "$renewed" -lt "$boot" ] || continue
		if k -n kube-system patch lease "$lease" --type merge \
			-p "{\"metadata\":{\"resourceVersion\":\"$3\"},\"spec\":{\"holderIdentity\":null}}" >/dev/null; then
			echo "leases: released $lease, held by $1 (this node's previous start) until $2"
		fi
	done
	;;
*)
	echo "usage: boot.sh rules POD=SVC... | boot.sh leases" >&2
	exit 2
	;;
esac
