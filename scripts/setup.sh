#!/usr/bin/env bash
# Shared set-up for a fresh Debian/Ubuntu machine (Python 3.11+); used by quickstart.sh and test.sh.
#
#   - etcd (Debian package etcd-server) when `etcd` is not on PATH;
#   - .venv: this project, editable, with its dev tools (pip install -e '.[dev]');
#   - .venv-danube-client: the reference Danube client (danube-client 0.5.0) for the interop tests.
#     It lives in its own venv because its generated protobuf modules clash with ours.
#
#   - with DANUBE_SETUP_BROWSER=1 (test.sh sets it; quickstart.sh does not): Debian's chromium,
#     the headless browser the web console's tests drive through Playwright (never a
#     downloaded browser).
#
# Idempotent and cheap to re-run: every step is skipped when already done. Environment:
#   PYTHON=python3.12         the interpreter to build the venvs with (default: python3)
#   DANUBE_SETUP_BROWSER=1    also install chromium (a failure is a warning: those tests skip)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf '==> %s\n' "$*"; }
# Run pip quietly; its (build-backend) chatter is shown only when it fails.
pip_quiet() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    rm -f "$log"
    die "failed: $*"
  fi
  rm -f "$log"
}
die() {
  printf 'setup.sh: error: %s\n' "$*" >&2
  exit 1
}

PY=${PYTHON:-python3}
VENV=.venv
CLIENT_VENV=.venv-danube-client
CLIENT_PKGS=(danube-client==0.5.0 'grpcio>=1.78' 'protobuf>=6.31.1')

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  SUDO=(sudo)
fi
apt_updated=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 ||
    die "apt-get not found; install these packages with your system's package manager: $*"
  if [ "${#SUDO[@]}" -gt 0 ] && ! command -v sudo >/dev/null 2>&1; then
    die "installing $* needs root: run as root or install sudo"
  fi
  if [ "$apt_updated" -eq 0 ]; then
    say "apt-get update"
    "${SUDO[@]}" apt-get update -qq
    apt_updated=1
  fi
  say "apt-get install $*"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# ---- 1. etcd
if command -v etcd >/dev/null 2>&1; then
  say "etcd: $(etcd --version 2>/dev/null | head -n 1) (already installed)"
else
  apt_install etcd-server
  command -v etcd >/dev/null 2>&1 || die "etcd-server was installed but no etcd binary is on PATH"
  say "etcd: $(etcd --version | head -n 1)"
fi

# ---- 2. Python 3.11+ with venv support
command -v "$PY" >/dev/null 2>&1 ||
  die "$PY not found: install Python 3.11 or newer (sudo apt-get install python3 python3-venv)"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  die "Python 3.11 or newer is needed, but $PY is $("$PY" -V 2>&1). Install a newer python3 and re-run with PYTHON=/path/to/python3.11"
fi
pyver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  # Debian ships venv's pip bootstrap separately.
  apt_install "python${pyver}-venv" || apt_install python3-venv
fi

venv_ok() { # a venv exists and runs a Python >= 3.11
  [ -x "$1/bin/python" ] && "$1/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null
}

# ---- 3. the project venv
if ! venv_ok "$VENV"; then
  say "creating $VENV with $PY ($pyver)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
fi
# The install is redone when pyproject.toml or the set of top-level packages changes (an
# editable install maps packages that existed when it ran).
stamp_file=$VENV/.danube-setup-stamp
stamp=$({
  cat pyproject.toml
  ls -d libs/*/danube_* services/*/danube_* deploy/danube_* spark/danube_* 2>/dev/null || true
} | sha256sum | cut -d' ' -f1)
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ] &&
  "$VENV/bin/python" -c 'import danube_common, danube_local, pytest, ruff, mypy' >/dev/null 2>&1; then
  say "$VENV: project and dev tools installed (up to date)"
else
  say "$VENV: pip install -e '.[dev]' (takes a minute the first time)"
  pip_quiet "$VENV/bin/python" -m pip install --disable-pip-version-check -e '.[dev]'
  echo "$stamp" >"$stamp_file"
  say "$VENV: ready"
fi

# ---- 4. the reference Danube client, in its own venv
if venv_ok "$CLIENT_VENV" &&
  "$CLIENT_VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("danube-client") != "0.5.0")' >/dev/null 2>&1 &&
  "$CLIENT_VENV/bin/python" -c 'import danube' >/dev/null 2>&1; then
  say "$CLIENT_VENV: danube-client 0.5.0 installed (up to date)"
else
  if ! venv_ok "$CLIENT_VENV"; then
    say "creating $CLIENT_VENV"
    rm -rf "$CLIENT_VENV"
    "$PY" -m venv "$CLIENT_VENV"
  fi
  say "$CLIENT_VENV: pip install ${CLIENT_PKGS[*]}"
  pip_quiet "$CLIENT_VENV/bin/python" -m pip install --disable-pip-version-check "${CLIENT_PKGS[@]}"
  "$CLIENT_VENV/bin/python" -c 'import danube' || die "$CLIENT_VENV: danube-client installed but does not import"
  say "$CLIENT_VENV: ready"
fi
# ---- 5. chromium for the web console's browser tests (only when asked)
if [ "${DANUBE_SETUP_BROWSER:-0}" = "1" ]; then
  if [ -x /usr/bin/chromium ]; then
    say "chromium: $(/usr/bin/chromium --version 2>/dev/null | head -n 1) (already installed)"
  elif (apt_install chromium) && [ -x /usr/bin/chromium ]; then
    say "chromium: $(/usr/bin/chromium --version 2>/dev/null | head -n 1)"
  else
    printf 'setup.sh: warning: chromium could not be installed (apt-get install chromium): the web console browser tests will be skipped\n' >&2
  fi
fi
say "set-up complete"
