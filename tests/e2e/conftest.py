"""A real local cluster (etcd + lookup + brokers as child processes) for end-to-end tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient

ROOT = Path(__file__).resolve().parents[2]
#: Small payload limit so the oversized-message test needs no huge buffers.
MAX_MESSAGE_SIZE_BYTES = 256 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    workdir = tmp_path_factory.mktemp("cluster")
    env = {
        "DANUBE_BROKER_MAX_MESSAGE_SIZE_BYTES": str(MAX_MESSAGE_SIZE_BYTES),
        "DANUBE_BROKER_REGISTRATION_TTL_S": "3",
    }
    c = LocalCluster(brokers=2, workdir=workdir, extra_env=env, log_level="INFO")
    c.start(timeout_s=60)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[DanubeClient]:
    c = DanubeClient(cluster.service_url)
    try:
        yield c
    finally:
        await c.close()


def cli(name: str) -> str:
    return str(ROOT / ".venv" / "bin" / name)


def interop_python() -> str:
    path = ROOT / ".venv-danube-client" / "bin" / "python"
    if not path.exists():
        pytest.fail(
            "the danube-client venv is missing: run ./test.sh (scripts/setup.sh creates .venv-danube-client)"
        )
    return str(path)


def subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONUNBUFFERED"] = "1"
    return env
