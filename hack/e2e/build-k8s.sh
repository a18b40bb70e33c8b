#!/usr/bin/env bash
# Build Kubernetes ${K8S_VERSION} server/node binaries from the Go module proxy
# (no GitHub, no dl.k8s.io) into $CACHE/k8s/${K8S_VERSION}/bin. Cached: a rerun is a no-op.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

OUT=$CACHE/k8s/$K8S_VERSION/bin
CMDS=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubeadm kubectl)

have_all() { local c; for c in "${CMDS[@]}"; do [ -x "$OUT/$c" ] || return 1; done; }
if have_all && [ -f "$OUT/.stamp" ]; then
  log "k8s $K8S_VERSION binaries cached in $OUT"; exit 0
fi

MOD=$CACHE/src/k8s-$K8S_VERSION
mkdir -p "$MOD" "$OUT"
# the committed wrapper module when it is for this version; else one generated below
if [ -f "$E2E_DIR/gomod/k8s/go.mod" ] && grep -q "k8s.io/kubernetes $K8S_VERSION" "$E2E_DIR/gomod/k8s/go.mod"; then
  cp "$E2E_DIR/gomod/k8s/"{go.mod,go.sum,tools.go} "$MOD/"
fi
if [ ! -f "$MOD/go.sum" ]; then
  log "generating wrapper module for k8s.io/kubernetes $K8S_VERSION"
  kmod=$(cd "$MOD" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | jq -r .GoMod) \
    || die "cannot fetch k8s.io/kubernetes@$K8S_VERSION from the Go module proxy ($(go env GOPROXY))"
  {
    echo "module meshctl.local/k8sbuild"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    # every staging module k8s.io/kubernetes replaces with ./staging/... -> the published module
    grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging/' "$kmod" | awk -v v="$K8S_STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
  } >"$MOD/go.mod"
  # tools.go keeps the commands' packages in the module for go mod tidy
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${CMDS[@]}"
    printf ')\n'
  } >"$MOD/tools.go"
  (cd "$MOD" && go mod tidy) || die "go mod tidy failed for the k8s wrapper module"
fi

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
X=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  X+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  X+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z -X $p.gitCommit=0000000000000000000000000000000000000000"
done
pkgs=(); for c in "${CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
log "building ${CMDS[*]} (one go build, CGO_ENABLED=0; cold ≈ 15 min on 2 idle vCPUs)"
(cd "$MOD" && go build -trimpath -ldflags "-s -w$X" -o "$OUT/" "${pkgs[@]}") \
  || die "go build of Kubernetes $K8S_VERSION failed (see output above)"
v=$("$OUT/kubeadm" version -o short)
[ "$v" = "$K8S_VERSION" ] || die "kubeadm reports $v, want $K8S_VERSION (version ldflags)"
touch "$OUT/.stamp"
log "k8s $K8S_VERSION binaries in $OUT"
