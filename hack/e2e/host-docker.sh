#!/usr/bin/env bash
# Make a Docker engine answer on this host, with what kind nodes need:
#  - docker.io from Debian apt (only if no engine answers already)
#  - cgroup v1 controllers the VM leaves unmounted (hugetlb, perf_event, net_cls,net_prio)
#  - inotify limits raised to kind's recommended minimums
#  - a runc wrapper as dockerd's default runtime, only where CAP_SYS_RESOURCE (bit 24)
#    is missing from the capability bounding set (privileged containers fail otherwise)
# Idempotent: a rerun with an answering engine takes well under a second.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

DOCKERD_LOG=${DOCKERD_LOG:-/var/log/meshctl-dockerd.log}

cap_sys_resource_missing() {
  local capbnd
  capbnd=$(awk '/^CapBnd:/{print $2}' /proc/self/status)
  (( (16#$capbnd >> 24 & 1) == 0 ))
}

mount_cgroup_v1() {
  [ -f /sys/fs/cgroup/cgroup.controllers ] && return 0   # pure cgroup v2: nothing to do
  grep -qw cgroup /proc/filesystems || die "kernel has no cgroup v1 filesystem"
  local c
  for c in hugetlb perf_event net_cls,net_prio; do
    grep -qw "${c%%,*}" /proc/cgroups || { log "cgroup controller ${c%%,*} not in this kernel; skipping"; continue; }
    if ! mountpoint -q "/sys/fs/cgroup/$c"; then
      mkdir -p "/sys/fs/cgroup/$c"
      mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c" \
        || die "cannot mount cgroup v1 controller $c (kubelet needs it)"
      log "mounted cgroup v1 controller $c"
    fi
  done
  if mountpoint -q /sys/fs/cgroup/net_cls,net_prio; then
    [ -e /sys/fs/cgroup/net_cls ] || ln -s net_cls,net_prio /sys/fs/cgroup/net_cls
    [ -e /sys/fs/cgroup/net_prio ] || ln -s net_cls,net_prio /sys/fs/cgroup/net_prio
  fi
}

install_runc_wrapper() {
  local bin dst=/usr/local/sbin/runc-nocap-sysresource
  command -v go >/dev/null || die "go is not on PATH (the runc wrapper is built from hack/e2e/runcwrap)"
  bin=$(runc_wrapper)
  # a new file renamed over the old one: dockerd may be running the old one right now
  install -m 0755 "$bin" "$dst.new" || die "cannot install $dst.new"
  mv -f "$dst.new" "$dst" || die "cannot rename $dst.new to $dst"
}

write_daemon_json() {
  mkdir -p /etc/docker
  local want
  if cap_sys_resource_missing; then
    install_runc_wrapper
    want='{"runtimes":{"runc-nocap":{"path":"/usr/local/sbin/runc-nocap-sysresource"}},"default-runtime":"runc-nocap","storage-driver":"overlay2"}'
  else
    want='{"storage-driver":"overlay2"}'
  fi
  if [ "$(cat /etc/docker/daemon.json 2>/dev/null)" != "$want" ]; then
    echo "$want" >/etc/docker/daemon.json
    return 1 # changed
  fi
  return 0
}

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

start_dockerd() {
  command -v dockerd >/dev/null || die "dockerd missing after install"
  if [ -d /run/systemd/system ]; then
    systemctl enable --now docker.service || die "systemctl start docker failed: journalctl -u docker"
    systemctl restart docker.service
  else
    # no systemd on this VM: run dockerd in the background (it starts its own containerd)
    if [ -f /run/meshctl-dockerd.pid ] && kill -0 "$(cat /run/meshctl-dockerd.pid)" 2>/dev/null; then
      kill "$(cat /run/meshctl-dockerd.pid)"; sleep 3
    fi
    nohup setsid dockerd --pidfile /run/meshctl-dockerd.pid >>"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  for _ in $(seq 1 60); do engine_answers && return 0; sleep 1; done
  tail -20 "$DOCKERD_LOG" >&2 || true
  die "dockerd did not answer within 60s (log: $DOCKERD_LOG)"
}

# raise_inotify_limits: kind's recommended minimums. With Debian's defaults (128
# instances) the fourth or fifth kind cluster's kube-proxy fails with "too many
# open files" and its node never becomes Ready (seen with parallel e2e specs).
raise_inotify_limits() {
  local key want have
  for kv in fs.inotify.max_user_instances=512 fs.inotify.max_user_watches=524288; do
    key=${kv%%=*} want=${kv#*=}
    have=$(sysctl -n "$key")
    if [ "$have" -lt "$want" ]; then
      sysctl -qw "$key=$want" && log "raised $key from $have to $want"
    fi
  done
}

need_root
mount_cgroup_v1
raise_inotify_limits
if engine_answers && ! [ -f /run/meshctl-dockerd.pid ] && ! [ -d /run/systemd/system ]; then
  # an engine we did not start: leave its configuration alone
  if cap_sys_resource_missing && ! grep -q runc-nocap /etc/docker/daemon.json 2>/dev/null; then
    log "WARNING: this docker engine was not started by meshctl and has no CAP_SYS_RESOURCE runc wrapper;"
    log "         privileged containers (kind nodes) will fail with 'unable to apply caps' (see hack/e2e/README.md)"
  fi
  log "docker engine answers ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
  exit 0
fi
changed=0
write_daemon_json || changed=1
if engine_answers && [ $changed = 0 ]; then
  log "docker engine answers ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
  exit 0
fi
if ! command -v dockerd >/dev/null; then
  log "installing docker.io from Debian apt"
  export DEBIAN_FRONTEND=noninteractive
  # keep apt from trying to start services under a non-systemd PID 1
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update -qq || die "apt-get update failed (is the Debian mirror reachable?)"
  apt-get install -y -qq --no-install-recommends docker.io jq iptables >/dev/null \
    || die "apt-get install docker.io failed"
fi
start_dockerd
log "docker engine answers ($(docker version -f '{{.Server.Version}}'))"
