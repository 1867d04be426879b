#!/usr/bin/env bash
# Set-up for the peer benchmarks (bench/drivers/nats.py, rabbitmq.py, redis_streams.py) on Debian/Ubuntu.
#
#   - nats-server, rabbitmq-server and redis-server (Debian packages) when missing. The benchmark
#     drivers start their own private servers on loopback and free ports; the system services the
#     packages install are never used, so they are kept from starting (policy-rc.d during the
#     install), disabled where systemd runs, and any RabbitMQ/epmd/Redis the package started anyway
#     is stopped;
#   - .venv: pip install -e '.[bench]' (matplotlib, nats-py, aiormq, redis, hiredis, psutil,
#     py-spy), or those seven directly while pyproject.toml has no `bench` extra.
#
# Run scripts/setup.sh first (it creates .venv). Idempotent: every step is skipped when done.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf '==> %s\n' "$*"; }
die() {
  printf 'setup_bench.sh: error: %s\n' "$*" >&2
  exit 1
}

VENV=.venv
BENCH_PKGS=(matplotlib nats-py aiormq redis hiredis psutil py-spy)

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "installing packages needs root: run as root or install sudo"
  SUDO=(sudo)
fi

# ---- 1. the servers
missing=()
command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
# rabbitmq-server lives in /usr/sbin, which is not on every user's PATH.
[ -x /usr/sbin/rabbitmq-server ] || command -v rabbitmq-server >/dev/null 2>&1 || missing+=(rabbitmq-server)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)

if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 ||
    die "apt-get not found; install these with your system's package manager: ${missing[*]}"
  # Keep the packages' init scripts from starting system services: invoke-rc.d asks
  # policy-rc.d, and exit code 101 means "action forbidden". An existing policy is left alone.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
    "${SUDO[@]}" chmod 755 "$policy"
    own_policy=1
  fi
  say "apt-get update"
  "${SUDO[@]}" apt-get update -qq
  say "apt-get install ${missing[*]}"
  rc=0
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || rc=$?
  if [ "$own_policy" -eq 1 ]; then
    "${SUDO[@]}" rm -f "$policy"
  fi
  [ "$rc" -eq 0 ] || die "apt-get install ${missing[*]} failed"
fi
command -v nats-server >/dev/null 2>&1 || die "nats-server was installed but is not on PATH"
say "nats-server: $(nats-server --version 2>&1 | head -n 1)"
say "rabbitmq-server: $(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null || echo 'installed')"
command -v redis-server >/dev/null 2>&1 || die "redis-server was installed but is not on PATH"
say "redis-server: $(redis-server --version 2>&1 | head -n 1)"

# ---- 2. no system RabbitMQ / NATS / Redis left running in the background
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  for unit in rabbitmq-server nats-server redis-server; do
    if systemctl is-enabled --quiet "$unit" 2>/dev/null || systemctl is-active --quiet "$unit" 2>/dev/null; then
      say "systemctl disable --now $unit (the benchmarks start their own)"
      "${SUDO[@]}" systemctl disable --now "$unit" >/dev/null 2>&1 || true
    fi
  done
fi
# Without systemd the package's init script may still have started a node as user rabbitmq. Only
# processes of the system users are touched: benchmark servers run as the invoking user.
for user in rabbitmq nats redis; do
  if id "$user" >/dev/null 2>&1 && pgrep -u "$user" >/dev/null 2>&1; then
    say "stopping the system $user processes the package started: $(pgrep -u "$user" -d ' ')"
    "${SUDO[@]}" pkill -TERM -u "$user" || true
    for _ in $(seq 50); do
      pgrep -u "$user" >/dev/null 2>&1 || break
      sleep 0.1
    done
    "${SUDO[@]}" pkill -KILL -u "$user" 2>/dev/null || true
  fi
done

# ---- 3. the Python clients
[ -x "$VENV/bin/python" ] || die "$VENV not found: run scripts/setup.sh first"
if "$VENV/bin/python" -c 'import matplotlib, nats, aiormq, redis, hiredis, psutil' >/dev/null 2>&1; then
  say "$VENV: bench packages installed (up to date)"
else
  if grep -Eq '^bench *= *\[' pyproject.toml; then
    say "$VENV: pip install -e '.[bench]'"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[bench]'
  else
    say "$VENV: pip install ${BENCH_PKGS[*]} (pyproject.toml has no bench extra yet)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${BENCH_PKGS[@]}"
  fi
  "$VENV/bin/python" -c 'import matplotlib, nats, aiormq, redis, hiredis, psutil' || die "bench packages installed but do not import"
fi
say "bench set-up complete"
