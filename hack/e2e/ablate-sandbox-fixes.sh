#!/usr/bin/env bash
# Which in-node fix does the pod-sandbox failure ("runc create failed: ... can't get final
# child's PID from pipe: EOF") need? Creates three single-node clusters from $NODE_IMAGE with
# containerdConfigPatches that undo the fixes: none / runc wrapper only / restrict_oom_score_adj
# only; prints pods and the containerd error, deletes each cluster. Takes ~8 min (the "none"
# case waits for kubeadm's 4 min timeout). Failures are the expected result for "none", so no -e.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
set +e
KIND=$CACHE/bin/kind-$KIND_VERSION
K=$CACHE/k8s/$K8S_VERSION/bin/kubectl
TMPDIR=$(mktemp -d); trap 'rm -rf "$TMPDIR"' EXIT
run() { # name restrict binary
  local n=$1 r=$2 b=$3
  cat >$TMPDIR/abl-$n.yaml <<Y
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
containerdConfigPatches:
- |-
  [plugins."io.containerd.grpc.v1.cri"]
    restrict_oom_score_adj = $r
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    BinaryName = "$b"
Y
  echo "=== $n restrict_oom_score_adj=$r BinaryName=$b"
  $KIND create cluster --name abl-$n --image "$NODE_IMAGE" --config $TMPDIR/abl-$n.yaml --kubeconfig $TMPDIR/abl-$n.kc --retain >$TMPDIR/abl-$n.log 2>&1; echo "create rc=$?"
  sleep 40
  $K --kubeconfig $TMPDIR/abl-$n.kc get pods -A 2>&1 | tail -12
  docker exec abl-$n-control-plane sh -c 'journalctl -u containerd --no-pager | grep -m2 -o "failed to create containerd task.*"; for p in $(pgrep -x pause); do printf "%s " $(cat /proc/$p/oom_score_adj); done; echo' 2>&1 | cut -c1-400
  $KIND delete cluster --name abl-$n >/dev/null 2>&1
  rm -f $TMPDIR/abl-$n.kc
}
run none false /usr/sbin/runc
run wrapper false /usr/local/sbin/runc-nocap-sysresource
run restrict true /usr/sbin/runc
