#!/usr/bin/env bash
# Debootstrap the kind node's Debian rootfs (systemd, containerd, runc, CNI plugins, iptables ...)
# into a cached tarball $CACHE/rootfs/node-<suite>-<hash>.tar. Needs only the Debian mirror.
# bookworm on purpose: systemd >= 256 (trixie) refuses cgroup v1, which this VM has.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

PKGS=(systemd systemd-sysv dbus
  conntrack iptables nftables iproute2 ethtool util-linux mount kmod
  libseccomp2 pigz bash ca-certificates curl jq procps e2fsprogs
  containerd runc containernetworking-plugins)
key=$(printf '%s\n' "$DEBIAN_SUITE" "$DEBIAN_MIRROR" "${PKGS[@]}" | sha256sum | cut -c1-12)
OUT=$CACHE/rootfs/node-$DEBIAN_SUITE-$key.tar
if [ -s "$OUT" ]; then log "node rootfs cached: $OUT"; echo "$OUT"; exit 0; fi

need_root
command -v debootstrap >/dev/null || {
  log "installing debootstrap from apt"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null || die "apt-get install debootstrap failed"
}
mkdir -p "$CACHE/rootfs"
work=$(mktemp -d "$CACHE/rootfs/work.XXXXXX")
trap 'umount -R "$work/rootfs/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
log "debootstrap $DEBIAN_SUITE (minbase + ${#PKGS[@]} packages) from $DEBIAN_MIRROR"
debootstrap --variant=minbase --include="$(IFS=,; echo "${PKGS[*]}")" \
  "$DEBIAN_SUITE" "$work/rootfs" "$DEBIAN_MIRROR" >"$work/debootstrap.log" 2>&1 \
  || { tail -30 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
r=$work/rootfs
# the same trimming kind's base image does
rm -f "$r"/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service \
      "$r"/lib/systemd/system/multi-user.target.wants/* "$r"/etc/systemd/system/*.wants/* \
      "$r"/lib/systemd/system/local-fs.target.wants/* "$r"/lib/systemd/system/sockets.target.wants/*udev* \
      "$r"/lib/systemd/system/sockets.target.wants/*initctl* "$r"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$r/etc/systemd/journald.conf"
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* "$r"/usr/share/doc/* "$r"/usr/share/man/* \
       "$r"/usr/share/locale/* "$r"/var/log/*.log
: >"$r/etc/machine-id"
tar -C "$r" --numeric-owner -cf "$OUT.tmp" . || die "cannot tar rootfs"
mv "$OUT.tmp" "$OUT"
log "node rootfs: $OUT ($(du -h "$OUT" | cut -f1))"
echo "$OUT"
