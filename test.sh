#!/usr/bin/env bash
# The project's test command (CI runs exactly this): set up, then every check and the tests.
#
#   ./test.sh                         # everything, the Docker compose test (scripts/compose_test.sh) last
#   ./test.sh -m unit                 # extra arguments go to pytest
#   ./test.sh tests/contract -x
#
# Every check runs even when an earlier one fails; the summary at the end lists them all and
# the exit status is non-zero if any failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

# DANUBE_SETUP_BROWSER=1: also Debian's chromium, for the web console's browser tests.
DANUBE_SETUP_BROWSER=1 bash scripts/setup.sh || {
  echo "test.sh: set-up failed; nothing was tested" >&2
  exit 1
}

# The set-up's writes (a fresh virtualenv, Chromium) reach the disk before the tests start, so a
# test etcd's first fsyncs do not queue behind their write-back (a CI run's etcd once stalled
# 3.4 s on a sync just after the set-up).
sync_start=$SECONDS
sync
echo "test.sh: set-up's writes flushed to disk ($((SECONDS - sync_start))s)"

BIN=.venv/bin
results=()
failed=0

step() {
  local name=$1
  shift
  printf '\n==> %s\n' "$name"
  local start=$SECONDS rc=0
  "$@" || rc=$?
  local took=$((SECONDS - start))
  if [ "$rc" -eq 0 ]; then
    results+=("  ok    $name (${took}s)")
  else
    results+=("  FAIL  $name (exit $rc, ${took}s)")
    failed=1
  fi
}

# mypy sees each top-level package from the folder that holds it (services are separate roots).
mypy_check() {
  local roots=() paths=(libs services deploy)
  local d
  for d in libs/* services/* deploy spark; do
    [ -d "$d" ] && roots+=("$d")
  done
  if [ -n "$(find spark -name '*.py' -print -quit 2>/dev/null)" ]; then
    paths+=(spark)
  fi
  local IFS=:
  MYPYPATH="${roots[*]}" "$BIN/mypy" --explicit-package-bases "${paths[@]}"
}

run_pytest() {
  local rc=0
  # --durations: the slowest tests are listed, so the suite's time budget (~15 min in CI) can be kept.
  "$BIN/pytest" -q -p no:cacheprovider --timeout=120 --durations=20 "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests (exit 5): check the paths, -k or -m arguments" >&2
  fi
  return "$rc"
}

step "protobuf code is up to date (scripts/gen_protos.py --check)" "$BIN/python" scripts/gen_protos.py --check
step "lint (ruff check .)" "$BIN/ruff" check .
step "format (ruff format --check .)" "$BIN/ruff" format --check .
step "types (mypy libs services deploy)" mypy_check
step "import contract (scripts/check_imports.py)" "$BIN/python" scripts/check_imports.py
if [ "$#" -eq 0 ]; then
  # The tests that mostly wait (timeouts, leases, subprocesses starting) run on two workers:
  # about 100 s less than one after the other. The fault, end-to-end and Spark tests keep the
  # machine to themselves: they load both cores on their own.
  step "tests: unit, contract, integration (pytest -n 2)" \
    run_pytest -n 2 tests/unit tests/contract tests/integration
  step "tests: the rest (pytest)" \
    run_pytest tests --ignore=tests/unit --ignore=tests/contract --ignore=tests/integration
else
  step "tests (pytest)" run_pytest "$@"
fi
# The whole cluster in Docker (deploy/docker-compose.yml with its test override): only in a full
# run, since it installs and starts a Docker engine and builds images (about 5-7 minutes from
# scratch; where no engine can be had, its tests are skipped with the reason). The images are
# kept as a build cache: the next run on this machine rebuilds only the project's own layers
# (about 85 s less here; `docker image rm danube-py:test danube-test-moto:bookworm
# danube-test-etcd:bookworm` frees the space).
if [ "$#" -eq 0 ]; then
  step "compose (scripts/compose_test.sh --keep-images)" bash scripts/compose_test.sh --keep-images
fi

printf '\n==> summary\n'
printf '%s\n' "${results[@]}"
if [ "$failed" -ne 0 ]; then
  echo "test.sh: FAILED"
  exit 1
fi
echo "test.sh: all checks passed"
