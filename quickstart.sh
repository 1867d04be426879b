#!/usr/bin/env bash
# Quickstart: set up (etcd, venvs) and run a local cluster (3 brokers, 2 load managers, 2 leader
# replicas, one lookup) with a short demo.
#
#   ./quickstart.sh                  # stays up until Ctrl-C
#   ./quickstart.sh --secure         # the same, secured: TLS, mTLS between services, JWT + RBAC;
#                                    # prints the admin token and TLS flags (docs/security.md)
#   ./quickstart.sh --brokers 5      # any `danube-local up` option can be added
#
# When stdin is not a terminal (CI, pipes) it stops after the demo and exits with its result.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

bash scripts/setup.sh
args=(--demo)
if [ ! -t 0 ]; then
  args+=(--exit-after-demo)
fi
echo "==> .venv/bin/danube-local up ${args[*]} $*"
exec .venv/bin/danube-local up "${args[@]}" "$@"
