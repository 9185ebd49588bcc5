#!/usr/bin/env bash
# Builds a Debian root that the sandbox runs a server version the machine's
# own archive lacks in: Oracle MySQL (Debian 12 has none; sid ships
# mysql-server-core 9.7) or MariaDB 11.8 (trixie's mariadb-server-core,
# beside the system's 10.11). Idempotent: a root with the ready marker is
# left alone. Every network step has a time limit and a failure says which
# step failed, so nothing hangs. Run as root.
# Usage: server-root.sh [KIND [DIR]]
#   KIND mysql (default; DIR /var/lib/shardctl/mysql-root)
#   KIND mariadb-11.8 (DIR /var/lib/shardctl/mariadb-11.8-root)
set -euo pipefail
KIND="${1:-mysql}"
case "$KIND" in
  mysql)
    DIR="${2:-${SHARDCTL_MYSQL_ROOT:-/var/lib/shardctl/mysql-root}}"
    SUITE=sid; SERVER=usr/sbin/mysqld
    PKGS=(mysql-server-core mysql-client openssl) ;;
  mariadb-11.8)
    DIR="${2:-${SHARDCTL_MARIADB118_ROOT:-/var/lib/shardctl/mariadb-11.8-root}}"
    # trixie, not sid: its 11.8 stays 11.8 (sid moves on to the next major).
    SUITE=trixie; SERVER=usr/sbin/mariadbd
    PKGS=(mariadb-server-core mariadb-client-core openssl) ;;
  *) echo "server-root: unknown kind $KIND (mysql or mariadb-11.8)" >&2; exit 2 ;;
esac
MARK="$DIR/.shardctl-ready"
export DEBIAN_FRONTEND=noninteractive
exec </dev/null

die() { echo "$KIND-root: $*" >&2; exit 1; }
say() { echo "$KIND-root: $*" >&2; }

ready() {
  if [ -f "$MARK" ] && [ -x "$DIR/$SERVER" ]; then say "$DIR is ready"; exit 0; fi
}

ready
[ "$(id -u)" -eq 0 ] || die "building $DIR needs root (run it with sudo)"

mkdir -p "$(dirname "$DIR")"
# One build at a time: test binaries that start at once wait for the first.
exec 9>"$DIR.lock"
timeout 1500 flock 9 || die "another build of $DIR holds $DIR.lock for over 25 minutes"
ready

start=$(date +%s)
apt_opts=(-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold -o Acquire::Retries=3 -o Acquire::http::Timeout=30)
if ! command -v debootstrap >/dev/null 2>&1; then
  say "installing debootstrap"
  timeout 300 apt-get "${apt_opts[@]}" update -qq >/dev/null || die "apt-get update timed out or failed"
  timeout 300 apt-get "${apt_opts[@]}" install -y -qq debootstrap >/dev/null || die "apt-get install debootstrap timed out or failed"
fi

# The mirror apt's own sources already name (reachable from this machine).
mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
  | grep -v security | awk '{print $2}' | head -1 || true)
mirror="${SHARDCTL_DEBIAN_MIRROR:-${mirror:-http://deb.debian.org/debian}}"

part="$DIR.partial"
cleanup() { umount "$part/proc" 2>/dev/null || true; }
trap cleanup EXIT
cleanup
rm -rf "$part"
say "debootstrap $SUITE from $mirror into $part (about 1 minute)"
timeout 900 debootstrap --variant=minbase "$SUITE" "$part" "$mirror" >"$DIR.build.log" 2>&1 \
  || die "debootstrap failed or timed out (log: $DIR.build.log)"
mount -t proc proc "$part/proc"
# No service starts inside the root.
printf '#!/bin/sh\nexit 101\n' >"$part/usr/sbin/policy-rc.d"
chmod +x "$part/usr/sbin/policy-rc.d"
say "installing ${PKGS[*]} in the root"
timeout 600 chroot "$part" apt-get "${apt_opts[@]}" -o Acquire::Check-Valid-Until=false update -qq >>"$DIR.build.log" 2>&1 \
  || die "apt-get update in the root failed or timed out (log: $DIR.build.log)"
timeout 1200 chroot "$part" apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${PKGS[@]}" >>"$DIR.build.log" 2>&1 \
  || die "apt-get install ${PKGS[*]} in the root failed or timed out (log: $DIR.build.log)"
[ -x "$part/$SERVER" ] || die "/$SERVER missing after the install (log: $DIR.build.log)"
chroot "$part" apt-get clean >/dev/null 2>&1 || true
cleanup
trap - EXIT
rm -rf "$DIR"
mv "$part" "$DIR"
touch "$MARK"
say "ready: $(chroot "$DIR" "/$SERVER" --version 2>/dev/null) in $(( $(date +%s) - start ))s"
