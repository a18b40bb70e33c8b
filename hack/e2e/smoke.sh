#!/usr/bin/env bash
# Prove real clusters work from the offline node image, using kind's own CLI:
#   cluster 1 (control-plane + worker) and cluster 2 (single node) at the same time on the
#   shared `kind` docker network; nodes Ready, CoreDNS ready, a busybox pod (side-loaded with
#   `kind load docker-image`) runs, resolves kubernetes.default via CoreDNS and reaches a pod on
#   the other node. Both clusters are deleted at the end (KEEP=1 keeps them).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
KUBECTL=$CACHE/k8s/$K8S_VERSION/bin/kubectl
KIND=("$E2E_DIR/kind.sh")
C1=${C1:-e2etest}
C2=${C2:-e2etest2}
TMP=$(mktemp -d)
cleanup() {
  local rc=$?
  if [ "${KEEP:-}" = 1 ]; then log "KEEP=1: clusters $C1 $C2 kept (kubeconfigs in $TMP)"; exit $rc; fi
  if [ $rc != 0 ]; then
    mkdir -p "$CACHE/smoke-logs"
    "${KIND[@]}" export logs "$CACHE/smoke-logs/$C1" --name "$C1" >/dev/null 2>&1 || true
    log "failed; kind logs exported to $CACHE/smoke-logs"
  fi
  "${KIND[@]}" delete cluster --name "$C1" >/dev/null 2>&1 || true
  "${KIND[@]}" delete cluster --name "$C2" >/dev/null 2>&1 || true
  rm -rf "$TMP"
  exit $rc
}
trap cleanup EXIT
docker image inspect "$NODE_IMAGE" >/dev/null 2>&1 || die "node image $NODE_IMAGE missing: run make e2e-env"

cat >"$TMP/c1.yaml" <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
- role: control-plane
- role: worker
YAML
t=$SECONDS
"${KIND[@]}" create cluster --name "$C1" --image "$NODE_IMAGE" --config "$TMP/c1.yaml" --kubeconfig "$TMP/c1" --wait 5m --retain \
  || die "kind create cluster $C1 failed"
log "TIMING cluster $C1 (2 nodes) created and Ready in $((SECONDS - t))s"
t=$SECONDS
"${KIND[@]}" create cluster --name "$C2" --image "$NODE_IMAGE" --kubeconfig "$TMP/c2" --wait 5m --retain \
  || die "kind create cluster $C2 failed"
log "TIMING cluster $C2 (1 node) created and Ready in $((SECONDS - t))s, with $C1 running"

check() { # $1 cluster name, $2 kubeconfig
  local k=("$KUBECTL" --kubeconfig "$2")
  "${k[@]}" wait --for=condition=Ready nodes --all --timeout=180s || die "$1: nodes not Ready"
  "${k[@]}" -n kube-system rollout status deploy/coredns --timeout=180s || { "${k[@]}" get pods -A -o wide; die "$1: CoreDNS not ready"; }
  "${KIND[@]}" load docker-image "$BUSYBOX_IMAGE" --name "$1" || die "$1: kind load docker-image failed"
  local nodes; nodes=$("${k[@]}" get nodes -o name | sed 's#node/##')
  local n i=0
  for n in $nodes; do
    "${k[@]}" run "bb$i" --image="$BUSYBOX_IMAGE" --image-pull-policy=Never --restart=Never \
      --overrides="{\"apiVersion\":\"v1\",\"spec\":{\"nodeName\":\"$n\",\"tolerations\":[{\"operator\":\"Exists\"}]}}" \
      --command -- sh -c 'echo ok >/tmp/index.html; httpd -f -p 8080 -h /tmp & sleep 3600' >/dev/null
    i=$((i+1))
  done
  "${k[@]}" wait --for=condition=Ready pod --all --timeout=120s || { "${k[@]}" describe pods; die "$1: busybox pods not Ready"; }
  "${k[@]}" get pods -o wide
  "${k[@]}" exec bb0 -- nslookup kubernetes.default.svc.cluster.local >/dev/null \
    || die "$1: DNS lookup through CoreDNS failed"
  local ip
  for ip in $("${k[@]}" get pods -o jsonpath='{.items[*].status.podIP}'); do
    # (Debian's busybox-static wget segfaults; plain HTTP over nc instead)
    [ "$("${k[@]}" exec bb0 -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $ip 8080" | tail -1)" = ok ] \
      || die "$1: pod bb0 cannot reach pod $ip:8080"
  done
  log "$1: nodes Ready, CoreDNS ready, busybox pods run, DNS and pod-to-pod work"
}
check "$C1" "$TMP/c1"
check "$C2" "$TMP/c2"
log "two clusters at once on docker network kind: $(docker network inspect kind -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}')"
t=$SECONDS
"${KIND[@]}" delete cluster --name "$C1"; "${KIND[@]}" delete cluster --name "$C2"
log "TIMING both clusters deleted in $((SECONDS - t))s"
