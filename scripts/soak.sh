#!/usr/bin/env bash
# The fault soak: every fault scenario of tests/fault/scenarios.py, in random order, on one local
# cluster, for as long as asked; prints the history checker's verdict after each run and a summary
# table (runs, failures, longest pause in acknowledgements per scenario). Exit status 1 if any run
# found a violation.
#
#   scripts/soak.sh --minutes 30                 # the issue-12 soak
#   scripts/soak.sh --scenario pause_past_lease --runs 5
#   scripts/soak.sh --list
#
# Needs the set-up of ./test.sh (etcd, the venv with the dev extras). Run as root to include the
# disk-full scenario for real (each broker's WAL gets a tmpfs it can fill).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
  bash scripts/setup.sh
fi
exec .venv/bin/python -m tests.fault.soak "$@"
