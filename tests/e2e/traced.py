"""The traced cluster of the tracing e2e tests (test_tracing.py: the data path;
test_tracing_control_plane.py: the control plane), and the CLI helpers they share.

Every service of the cluster exports to a :class:`tests.support.otlp.OtlpReceiver` (a real
OTLP/gRPC TraceService) in batches every 100 ms; the CLIs export there too when run with
:func:`app_env`.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from danube_local.cluster import LocalCluster
from tests.e2e.conftest import cli, subprocess_env
from tests.support.otlp import OtlpReceiver, ReceivedSpan

#: Short timers so moves and re-placements happen within a test's budget.
ENV = {
    "DANUBE_BROKER_REGISTRATION_TTL_S": "3",
    "DANUBE_BROKER_MOVE_TIMEOUT_S": "20",
    "DANUBE_LOAD_MANAGER_RECONCILE_INTERVAL_S": "0.5",
}


@contextlib.contextmanager
def traced_cluster(
    otlp: OtlpReceiver, workdir: Path, *, planner: str | None = None
) -> Iterator[LocalCluster]:
    """Two brokers with WAL uploaders (a reliable topic's move flushes its log to object storage),
    one leader, one load manager, and with ``planner`` (an engine name) the planner; every
    process traced to ``otlp``."""
    c = LocalCluster(
        brokers=2,
        leaders=1,
        load_managers=1,
        uploaders=True,
        planner=planner,
        workdir=workdir,
        extra_env={**ENV, **otlp.env()},
    )
    c.start(timeout_s=90)
    try:
        yield c
    finally:
        c.stop()


def run(args: list[str], *, env: dict[str, str], timeout_s: float = 60) -> str:
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert res.returncode == 0, f"{args[0]} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res.stdout


def app_env(otlp: OtlpReceiver, service: str, **sampler: str) -> dict[str, str]:
    """The environment of a CLI exporting to ``otlp`` as ``service``."""
    return {**subprocess_env(), **otlp.env(**sampler), "OTEL_SERVICE_NAME": service}


def admin(cluster: LocalCluster, *args: str) -> str:
    """``danube-admin`` (it does not trace: the lookup's admin RPC spans are roots)."""
    return run([cli("danube-admin"), "--admin-url", cluster.admin_url, *args], env=subprocess_env())


def one(spans: list[ReceivedSpan], what: str) -> ReceivedSpan:
    assert len(spans) == 1, f"expected one {what}, got {[str(s) for s in spans]}"
    return spans[0]
