# Shared set-up for scripts/*.sh: install what is missing on a fresh Debian machine.
# Sourced, not run.

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

apt_updated=""
apt_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if [ -z "$apt_updated" ]; then
    $sudo apt-get update -qq >/dev/null
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

have_mariadbd() { command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; }

ensure_mariadb() {
  if ! have_mariadbd || ! command -v mariadb-install-db >/dev/null 2>&1; then
    log "installing MariaDB (mariadbd is missing)"
    apt_install mariadb-server mariadb-client
  fi
}

# Oracle MySQL runs in a Debian sid root (Debian 12 has none), MariaDB 11.8 in
# a trixie root beside the system's 10.11; each built once by
# sandbox/server-root.sh: idempotent, every network step under a time limit.
# Usage: ensure_root mysql|mariadb-11.8
ensure_root() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  log "$1 root: building it if missing"
  timeout 1500 $sudo bash "$(dirname "${BASH_SOURCE[0]}")/../sandbox/server-root.sh" "$1" </dev/null
}

ensure_mysql() { ensure_root mysql; }

ensure_go() {
  if ! command -v go >/dev/null 2>&1; then
    if [ -x /usr/local/go/bin/go ]; then
      export PATH="/usr/local/go/bin:$PATH"
    else
      log "installing Go"
      apt_install golang-go
    fi
  fi
  export PATH="$(go env GOPATH)/bin:$PATH"
}

ensure_staticcheck() {
  if ! command -v staticcheck >/dev/null 2>&1; then
    log "installing staticcheck"
    GOFLAGS= go install honnef.co/go/tools/cmd/staticcheck@v0.6.1
  fi
}

# Tools the benchmarks compare against.
ensure_bench_tools() {
  local missing=()
  command -v sysbench >/dev/null 2>&1 || missing+=(sysbench)
  command -v mydumper >/dev/null 2>&1 || missing+=(mydumper)
  command -v pt-archiver >/dev/null 2>&1 || missing+=(percona-toolkit)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt_install "${missing[@]}"
  fi
}

build() {
  log "building bin/shardctl"
  go build -o bin/shardctl -ldflags "-X github.com/shardctl/shardctl/cmd.Version=$(git describe --always --dirty 2>/dev/null || echo dev)" .
}
