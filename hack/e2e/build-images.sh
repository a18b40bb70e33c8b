#!/usr/bin/env bash
# Assemble, without pulling anything, the images a kind cluster needs and the node image:
#  - small single-layer images (docker import of a directory): kube-apiserver, -controller-manager,
#    -scheduler, kube-proxy (+iptables), etcd, coredns, pause, kindnetd (+iptables), busybox, registry
#  - the node image $NODE_IMAGE: debootstrapped rootfs + kind's base files + kubelet/kubeadm/kubectl
#    + the images above preloaded into the node's containerd (namespace k8s.io, pinned)
# Every output is keyed by the hash of its inputs; a rerun with nothing changed only checks labels.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_root

KB=$CACHE/k8s/$K8S_VERSION/bin
B=$CACHE/bin
IMG=$CACHE/images
mkdir -p "$IMG"
KIND_SRC=$(kind_src)
ROOTFS_TAR=$("$E2E_DIR/build-rootfs.sh")
for f in "$KB"/{kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy,kubelet,kubeadm,kubectl} \
         "$B/etcd-$ETCD_VERSION" "$B/coredns-$COREDNS_VERSION" "$B/pause-$PAUSE_VERSION" "$B/kindnetd" "$B/registry-$REGISTRY_VERSION"; do
  [ -x "$f" ] || die "missing $f (run hack/e2e/build-k8s.sh and hack/e2e/build-extras.sh first)"
done

ETCD_TAG=$("$KB/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null | sed -n 's#^registry.k8s.io/etcd:##p')
[ -n "$ETCD_TAG" ] || die "cannot read the etcd image tag from kubeadm config images list"
KINDNETD_IMAGE=$(sed -n 's/^const kindnetdImage = "\(.*\)"/\1/p' "$KIND_SRC/pkg/build/nodeimage/const_cni.go")
STORAGE_IMAGE=$(sed -n 's/^const storageProvisionerImage = "\(.*\)"/\1/p' "$KIND_SRC/pkg/build/nodeimage/const_storage.go")
STORAGE_HELPER_IMAGE=$(sed -n 's/^const storageHelperImage = "\(.*\)"/\1/p' "$KIND_SRC/pkg/build/nodeimage/const_storage.go")
[ -n "$KINDNETD_IMAGE" ] || die "cannot find kindnetdImage in kind $KIND_VERSION sources"

# content hash of files, memoized by (path, size, mtime) so a warm rerun does not re-read ~1 GB
HASHMEMO=$IMG/.hashmemo
touch "$HASHMEMO"
hash_file() {
  local id h; id=$(stat -c '%n|%s|%Y' "$1")
  h=$(grep -F "$id " "$HASHMEMO" | tail -1 | cut -d' ' -f2) || true
  if [ -z "$h" ]; then h=$(sha256sum <"$1" | cut -c1-16); echo "$id $h" >>"$HASHMEMO"; fi
  echo "$h"
}
hash_files() { local f; for f in "$@"; do hash_file "$f"; done | sha256sum | cut -c1-16; }
image_key() { docker image inspect -f '{{ index .Config.Labels "meshctl.key" }}' "$1" 2>/dev/null || true; }

# import_dir IMAGE DIR KEY CHANGES...: docker import DIR as IMAGE (single layer) unless IMAGE has KEY
import_dir() {
  local image=$1 dir=$2 key=$3; shift 3
  local changes=(--change "LABEL meshctl.key=$key") stopsignal=""
  local c; for c in "$@"; do
    case "$c" in STOPSIGNAL*) stopsignal=$c ;; *) changes+=(--change "$c") ;; esac
  done
  tar -C "$dir" --numeric-owner --owner=0 --group=0 -c . | docker import "${changes[@]}" - "$image" >/dev/null \
    || die "docker import $image failed"
  # docker 20.10 accepts STOPSIGNAL neither in import nor in commit; kind removes nodes with
  # `docker rm -f` (SIGKILL), so the image goes without it
  [ -z "$stopsignal" ] || log "note: $image built without $stopsignal (docker $(docker version -f '{{.Server.Version}}') cannot set it)"
}

# minimal rootfs skeleton shared by the small images
skeleton() {
  local d=$1
  mkdir -p "$d"/{etc,tmp,usr/local/bin,bin,var/run,root}
  chmod 1777 "$d/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$d/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$d/etc/group"
  printf 'hosts: files dns\n' >"$d/etc/nsswitch.conf"
  cp /etc/ssl/certs/ca-certificates.crt "$d/etc/ca-certificates.crt" 2>/dev/null || true
  mkdir -p "$d/etc/ssl/certs"; [ -f "$d/etc/ca-certificates.crt" ] && cp "$d/etc/ca-certificates.crt" "$d/etc/ssl/certs/"
}

# iptables/nft/ip userland (nft backend) copied out of the node rootfs with its libraries
IPT_DIR=""
iptables_bundle() {
  local d=$1
  if [ -z "$IPT_DIR" ]; then
    IPT_DIR=$WORK/iptables
    local r=$WORK/rootfs-ipt
    mkdir -p "$r" "$IPT_DIR"
    tar -C "$r" -xf "$ROOTFS_TAR"
    # every binary and library, by its canonical path (usr-merged) and as the symlink name used
    local files
    # shellcheck disable=SC2016 # the $ in this script are for the chroot's sh to expand
    files=$(chroot "$r" /bin/sh -ec '
      canon() { echo "$(readlink -f "$(dirname "$1")")/$(basename "$1")"; readlink -f "$1"; }
      for b in /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi /usr/sbin/nft /usr/sbin/conntrack /usr/bin/ip /usr/sbin/ip; do
        [ -e "$b" ] || continue
        canon "$b"
        for l in $(ldd "$b" | grep -o "/[^ ]*"); do canon "$l"; done
      done
      for l in /usr/lib/x86_64-linux-gnu/xtables/*.so; do ldd "$l" | grep -o "/[^ ]*"; done | sort -u | while read -r m; do canon "$m"; done' | sort -u) || die "cannot list iptables files in the node rootfs"
    local f
    for f in $files; do (cd "$r" && cp -a --parents "${f#/}" "$IPT_DIR/"); done
    (cd "$r" && cp -a --parents usr/lib/x86_64-linux-gnu/xtables "$IPT_DIR/")
    (cd "$r" && for f in etc/ethertypes etc/protocols etc/services; do [ -e "$f" ] && cp -a --parents "$f" "$IPT_DIR/"; done; true)
    ln -s usr/lib "$IPT_DIR/lib"; ln -s usr/lib64 "$IPT_DIR/lib64"; ln -s usr/sbin "$IPT_DIR/sbin"
    local t
    for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
      ln -sf xtables-nft-multi "$IPT_DIR/usr/sbin/$t"
      ln -sf xtables-nft-multi "$IPT_DIR/usr/sbin/${t/tables/tables-nft}"
      ln -sf xtables-legacy-multi "$IPT_DIR/usr/sbin/${t/tables/tables-legacy}"
    done
    rm -rf "$r"
  fi
  cp -a "$IPT_DIR"/. "$d/"
}

PATHENV='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
WORK=$(mktemp -d "$CACHE/images/work.XXXXXX")
trap 'umount "$WORK/node/proc" 2>/dev/null || true; rm -rf "$WORK"' EXIT

# small_image IMAGE KEY SETUP_FN CHANGES...: a skeleton, filled by SETUP_FN DIR, imported
# as IMAGE with the docker import CHANGES, saved for the node's preload; skipped if IMAGE
# already has KEY
small_image() {
  local image=$1 key=$2 setup=$3; shift 3
  local base tarball old
  base=$IMG/$(echo "$image" | tr '/:' '__')
  tarball=$base-$key.tar
  if [ "$(image_key "$image")" = "$key" ] && [ -s "$tarball" ]; then
    log "image cached: $image"; echo "$tarball" >>"$WORK/preload"; return 0
  fi
  local d=$WORK/img-$RANDOM; skeleton "$d"
  $setup "$d"
  import_dir "$image" "$d" "$key" "$PATHENV" "$@"
  { docker save "$image" -o "$tarball.tmp" && mv "$tarball.tmp" "$tarball"; } || die "docker save $image failed"
  for old in "$base"-*.tar; do [ "$old" = "$tarball" ] || rm -f "$old"; done # older versions
  rm -rf "$d"
  log "image built: $image"
  echo "$tarball" >>"$WORK/preload"
}

: >"$WORK/preload"
# the control-plane images hold their binary alone; setup_control_plane copies $component's
setup_control_plane() { cp "$KB/$component" "$1/usr/local/bin/"; }
for component in kube-apiserver kube-controller-manager kube-scheduler; do
  small_image "registry.k8s.io/$component:$K8S_VERSION" "$(hash_files "$KB/$component")" setup_control_plane "ENTRYPOINT [\"/usr/local/bin/$component\"]"
done
setup_kube_proxy() { cp "$KB/kube-proxy" "$1/usr/local/bin/"; iptables_bundle "$1"; }
small_image "registry.k8s.io/kube-proxy:$K8S_VERSION" "$(hash_files "$KB/kube-proxy" "$ROOTFS_TAR" "$0")" setup_kube_proxy 'ENTRYPOINT ["/usr/local/bin/kube-proxy"]'
setup_etcd() { cp "$B/etcd-$ETCD_VERSION" "$1/usr/local/bin/etcd"; mkdir -p "$1/var/lib/etcd"; }
small_image "registry.k8s.io/etcd:$ETCD_TAG" "$(hash_files "$B/etcd-$ETCD_VERSION")" setup_etcd 'ENTRYPOINT ["/usr/local/bin/etcd"]'
setup_coredns() { cp "$B/coredns-$COREDNS_VERSION" "$1/coredns"; }
small_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$(hash_files "$B/coredns-$COREDNS_VERSION")" setup_coredns 'ENTRYPOINT ["/coredns"]' 'EXPOSE 53 53/udp'
setup_pause() { cp "$B/pause-$PAUSE_VERSION" "$1/pause"; }
small_image "registry.k8s.io/pause:$PAUSE_VERSION" "$(hash_files "$B/pause-$PAUSE_VERSION")" setup_pause 'ENTRYPOINT ["/pause"]' 'USER 65535:65535'
setup_kindnetd() { cp "$B/kindnetd" "$1/bin/kindnetd"; iptables_bundle "$1"; }
small_image "$KINDNETD_IMAGE" "$(hash_files "$B/kindnetd" "$ROOTFS_TAR" "$0")" setup_kindnetd 'ENTRYPOINT ["/bin/kindnetd"]'
# busybox for tests (and as kind's local-path helper image: it only needs sh, mkdir, rm)
setup_busybox() { cp "$(command -v busybox)" "$1/bin/busybox"; local a; for a in $("$1/bin/busybox" --list); do [ -e "$1/bin/$a" ] || ln -s busybox "$1/bin/$a"; done; }
command -v busybox >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null || die "apt-get install busybox-static failed"; }
BB_KEY=$(hash_files "$(command -v busybox)")
small_image "$BUSYBOX_IMAGE" "$BB_KEY" setup_busybox 'CMD ["/bin/sh"]'
[ -n "$STORAGE_HELPER_IMAGE" ] && small_image "$STORAGE_HELPER_IMAGE" "$BB_KEY" setup_busybox 'CMD ["/bin/sh"]'
if [ -x "$B/local-path-provisioner" ] && [ -n "$STORAGE_IMAGE" ]; then
  setup_lpp() { cp "$B/local-path-provisioner" "$1/usr/local/bin/local-path-provisioner"; }
  small_image "$STORAGE_IMAGE" "$(hash_files "$B/local-path-provisioner")" setup_lpp 'ENTRYPOINT ["/usr/local/bin/local-path-provisioner"]'
fi
# the local registry (kind's "kind-registry" container); not preloaded into nodes
setup_registry() {
  cp "$B/registry-$REGISTRY_VERSION" "$1/bin/registry"; mkdir -p "$1/etc/distribution" "$1/var/lib/registry"
  cat >"$1/etc/distribution/config.yml" <<'YML'
version: 0.1
log:
  fields:
    service: registry
storage:
  filesystem:
    rootdirectory: /var/lib/registry
  delete:
    enabled: true
http:
  addr: :5000
YML
}
small_image "$REGISTRY_IMAGE" "$(hash_files "$B/registry-$REGISTRY_VERSION")" setup_registry \
  'ENTRYPOINT ["/bin/registry"]' 'CMD ["serve", "/etc/distribution/config.yml"]' 'EXPOSE 5000' 'VOLUME ["/var/lib/registry"]'
grep -v "$(echo "$REGISTRY_IMAGE" | tr '/:' '__')" "$WORK/preload" >"$WORK/preload.node"

# ---- node image --------------------------------------------------------------------------
NODE_KEY=$( (hash_files "$ROOTFS_TAR" "$KB/kubelet" "$KB/kubeadm" "$KB/kubectl";
  cat "$WORK/preload.node"; find "$KIND_SRC/images/base/files" -type f -print0 | sort -z | xargs -0 cat | sha256sum;
  cat "$0" "$E2E_DIR/runcwrap/main.go" "$E2E_DIR/kindconst/main.go") | sha256sum | cut -c1-16)
if [ "$(image_key "$NODE_IMAGE")" = "$NODE_KEY" ]; then
  log "node image cached: $NODE_IMAGE"
else
  r=$WORK/node
  mkdir -p "$r"
  log "assembling node rootfs"
  tar -C "$r" -xf "$ROOTFS_TAR"
  # kind's base files, with the modes kind's Dockerfile gives them
  bf=$KIND_SRC/images/base/files
  install -m 0755 "$bf"/usr/local/bin/* "$r/usr/local/bin/"
  mkdir -p "$r/kind/bin" "$r/kind/manifests" "$r/LICENSES" "$r/etc/containerd" "$r/etc/default" "$r/etc/sysctl.d" \
           "$r/etc/systemd/system/kubelet.service.d" "$r/etc/kubernetes/manifests" "$r/opt/cni/bin" "$r/etc/cni/net.d"
  install -m 0644 "$bf"/kind/README.txt "$r/kind/" 2>/dev/null || true
  install -m 0755 "$bf"/kind/bin/* "$r/kind/bin/"
  # kind's createContainer hook, run for every container a node starts, read the OCI
  # state's bundle with jq (≈ 33 CPU-ms a start); bash's parameter expansion reads it
  # shellcheck disable=SC2016 # the replacement is the hook's own bash, not expanded here
  sed -i 's|^bundle=$(jq -r .bundle)$|IFS= read -r -d "" state \|\| true; bundle=${state#*\\"bundle\\":\\"}; bundle=${bundle%%\\"*}|' \
    "$r/kind/bin/mount-product-files.sh"
  # shellcheck disable=SC2016
  grep -qF 'bundle=${state#*\"bundle\":\"}' "$r/kind/bin/mount-product-files.sh" \
    || die "kind's mount-product-files.sh no longer reads the bundle with jq: revisit its patch"
  install -m 0644 "$bf"/etc/crictl.yaml "$r/etc/"
  install -m 0644 "$bf"/etc/containerd/* "$r/etc/containerd/"
  install -m 0644 "$bf"/etc/default/* "$r/etc/default/"
  install -m 0644 "$bf"/etc/sysctl.d/* "$r/etc/sysctl.d/"
  install -m 0644 "$bf"/etc/systemd/system/*.service "$bf"/etc/systemd/system/*.slice "$r/etc/systemd/system/"
  install -m 0644 "$bf"/etc/systemd/system/kubelet.service.d/* "$r/etc/systemd/system/kubelet.service.d/"
  # binaries: kind's units expect /usr/local/bin/containerd and /usr/bin/kubelet
  ln -sf /usr/bin/containerd "$r/usr/local/bin/containerd"
  ln -sf /usr/bin/ctr "$r/usr/local/bin/ctr"
  ln -sf /usr/bin/containerd-shim-runc-v2 "$r/usr/local/bin/containerd-shim-runc-v2"
  install -m 0755 "$KB"/{kubelet,kubeadm,kubectl} "$r/usr/bin/"
  cp -a "$r"/usr/lib/cni/. "$r/opt/cni/bin/"
  install -m 0755 "$(runc_wrapper)" "$r/usr/local/sbin/runc-nocap-sysresource"
  ln -sf /usr/lib/systemd/systemd "$r/sbin/init"
  # containerd: the CRI base spec kind generates; pause; the fixes for a VM without CAP_SYS_RESOURCE
  chroot "$r" ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
    | jq 'del(.process.rlimits)' >"$r/etc/containerd/cri-base.json" || die "cannot generate cri-base.json with ctr oci spec"
  sed -i -e "s#sandbox_image = .*#sandbox_image = \"registry.k8s.io/pause:$PAUSE_VERSION\"#" \
         -e 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' "$r/etc/containerd/config.toml"
  # runc through a wrapper that drops CAP_SYS_RESOURCE and a negative oomScoreAdj when the
  # capability bounding set lacks CAP_SYS_RESOURCE (a pass-through elsewhere)
  wrapper=/usr/local/sbin/runc-nocap-sysresource
  sed -i -E "s#^[[:space:]]*\[plugins\.\"io\.containerd\.grpc\.v1\.cri\"\.containerd\.runtimes\.(runc|test-handler)\.options\]\$#&\n    BinaryName = \"$wrapper\"#" \
    "$r/etc/containerd/config.toml"
  for rt in runc test-handler; do
    grep -A1 -F "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.$rt.options]" "$r/etc/containerd/config.toml" \
      | grep -qxF "    BinaryName = \"$wrapper\"" || die "cannot patch containerd config.toml: no options table for runtime $rt"
  done
  # containerd's unit asks for OOMScoreAdjust=-999, which needs CAP_SYS_RESOURCE
  mkdir -p "$r/etc/systemd/system/containerd.service.d"
  printf '[Service]\nOOMScoreAdjust=0\n' >"$r/etc/systemd/system/containerd.service.d/10-meshctl.conf"
  # services kind enables
  for u in kubelet containerd undo-mount-hacks; do
    mkdir -p "$r/etc/systemd/system/multi-user.target.wants"
    ln -sf "/etc/systemd/system/$u.service" "$r/etc/systemd/system/multi-user.target.wants/$u.service"
  done
  ln -sf /dev/null "$r/etc/systemd/system/systemd-binfmt.service"
  # kind's metadata: version and default manifests (CNI, storage)
  printf '%s' "$K8S_VERSION" >"$r/kind/version"
  nodeimage=("$KIND_SRC/pkg/build/nodeimage/const_cni.go" "$KIND_SRC/pkg/build/nodeimage/const_storage.go")
  { go -C "$E2E_DIR/../.." build -o "$WORK/kindconst" ./hack/e2e/kindconst \
      && "$WORK/kindconst" defaultCNIManifest "${nodeimage[@]}" >"$r/kind/manifests/default-cni.yaml" \
      && "$WORK/kindconst" defaultStorageManifest "${nodeimage[@]}" >"$r/kind/manifests/default-storage.yaml"; } \
    || die "cannot extract kind's default manifests from $KIND_SRC"
  # preload images into the node's containerd (run the rootfs's own containerd in a chroot)
  log "preloading $(wc -l <"$WORK/preload.node") images into the node's containerd"
  mount -t proc proc "$r/proc"
  cat >"$WORK/ctrd.toml" <<'TOML'
version = 2
root = "/var/lib/containerd"
state = "/run/containerd-preload"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "/run/containerd-preload/containerd.sock"
TOML
  cp "$WORK/ctrd.toml" "$r/tmp/ctrd.toml"
  chroot "$r" /usr/bin/containerd --config /tmp/ctrd.toml >"$WORK/containerd.log" 2>&1 &
  ctrd_pid=$!
  for _ in $(seq 1 50); do [ -S "$r/run/containerd-preload/containerd.sock" ] && break; sleep 0.2; done
  [ -S "$r/run/containerd-preload/containerd.sock" ] || { cat "$WORK/containerd.log" >&2; die "preload containerd did not start"; }
  # Unpacked here, once, into the overlayfs snapshotter the node's CRI uses, and the layer
  # blobs then dropped (what containerd's discard_unpacked_layers does for CRI pulls): a
  # node imported with --no-unpack extracted ~530 MB of layers on every cluster creation
  # (containerd logs "The image ... is not unpacked" at boot), and the node's /var volume
  # got a copy of the blobs too. The image's config and manifest stay, so the CRI lists
  # the image and sees its snapshot chain.
  pctr() { chroot "$r" ctr -a /run/containerd-preload/containerd.sock -n k8s.io "$@"; }
  while read -r t; do
    pctr images import --label=io.cri-containerd.pinned=pinned --all-platforms - <"$t" >/dev/null \
      || { kill "$ctrd_pid"; die "ctr import $t failed"; }
  done <"$WORK/preload.node"
  pctr images ls -q >&2
  # (the loop writes a file, not a pipe, so that die ends the script, not a subshell)
  for m in $(pctr images ls | awk 'NR > 1 { print $3 }' | sort -u); do
    pctr content get "$m" </dev/null | jq -r '(.layers // [])[].digest' || { kill "$ctrd_pid"; die "cannot read manifest $m"; }
  done >"$WORK/layers.all"
  sort -u "$WORK/layers.all" >"$WORK/layers"
  [ "$(find "$r/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots" -mindepth 1 -maxdepth 1 | wc -l)" -ge "$(wc -l <"$WORK/preload.node")" ] \
    || { kill "$ctrd_pid"; die "preloaded images were not unpacked into the overlayfs snapshotter"; }
  xargs -r chroot "$r" ctr -a /run/containerd-preload/containerd.sock -n k8s.io content rm <"$WORK/layers" >/dev/null \
    || { kill "$ctrd_pid"; die "cannot drop the unpacked layers' blobs"; }
  kill "$ctrd_pid"; wait "$ctrd_pid" 2>/dev/null || true
  # content rm drops the metadata's reference; the file goes only at containerd's next
  # garbage collection, which this short-lived containerd does not reach
  sed 's#^sha256:#'"$r"'/var/lib/containerd/io.containerd.content.v1.content/blobs/sha256/#' "$WORK/layers" | xargs -r rm -f
  # The snapshots live outside /var, each behind a symlink: kind gives every node /var as
  # a fresh Docker volume, which Docker fills with a copy of the image's /var (dockerd's
  # CPU on a node creation was mostly that copy of ~530 MB). The snapshots are the
  # overlay mounts' read-only lower layers, which may sit on the node's own overlay root.
  snaps=$r/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots
  mkdir -p "$r/kind/preload-snapshots"
  for s in "$snaps"/*; do
    { mv "$s" "$r/kind/preload-snapshots/" && ln -s "/kind/preload-snapshots/${s##*/}" "$s"; } || die "cannot move snapshot $s out of /var"
  done
  umount "$r/proc"
  rm -rf "$r/run/containerd-preload" "$r/tmp/ctrd.toml"
  log "importing node image $NODE_IMAGE"
  import_dir "$NODE_IMAGE" "$r" "$NODE_KEY" 'ENV container=docker' 'STOPSIGNAL SIGRTMIN+3' \
    'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$PATHENV"
  rm -rf "$r"
fi
docker image prune -f --filter label=meshctl.key >/dev/null 2>&1 || true
echo "NODE_IMAGE=$NODE_IMAGE"
echo "REGISTRY_IMAGE=$REGISTRY_IMAGE"
echo "BUSYBOX_IMAGE=$BUSYBOX_IMAGE"
