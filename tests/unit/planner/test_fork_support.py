"""The planner switches gRPC's fork handlers off before grpc is imported (Spark's JVM is forked)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

PROBE = (
    "import sys, danube_planner.__main__, os; "
    "print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'), 'grpc' in sys.modules)"
)


def _run(env: dict[str, str]) -> str:
    res = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_fork_support_is_off_in_the_planner_process() -> None:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    # grpc is imported by then (the entry point's imports), so the setting came first.
    assert _run(env) == "false True"
