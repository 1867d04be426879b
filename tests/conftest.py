"""Fixtures shared by every suite. Servers run on free loopback ports and are always stopped."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.metadata.memory import MemoryStore
from danube_common.resources import Resources
from tests.support import containers, unique

# The session-scoped Spark standalone cluster fixture (``spark_standalone``).
pytest_plugins = ("tests.support.spark_cluster",)

# Keep gRPC away from any proxy configured on the machine: all traffic here is loopback.
for _var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "grpc_proxy"):
    os.environ.pop(_var, None)
os.environ.setdefault("no_proxy", "127.0.0.1,localhost")


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Where etcd and S3 run in this session: the one choice of tests/support/containers.py."""
    made = containers.choice()
    lines = [f"test servers: {made.backend} ({made.reason})"]
    if not _compose_selected(config):
        lines.append("tests marked compose are deselected: scripts/compose_test.sh runs them (-m compose)")
    return lines


def _compose_selected(config: pytest.Config) -> bool:
    return "compose" in (config.option.markexpr or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``compose`` (a Docker engine, images built by scripts/compose_test.sh) run
    only when a ``-m`` expression names the marker; the main suite leaves them out."""
    if _compose_selected(config):
        return
    dropped = [item for item in items if item.get_closest_marker("compose") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker("compose") is None]


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdProcess | Any]:
    """etcd on free loopback ports: a local process, or a container when the run uses containers
    (``DANUBE_TEST_CONTAINERS=1``, see tests/support/containers.py); both have ``endpoint``,
    ``start()`` and ``stop()``."""
    if containers.backend() == "local" and shutil.which("etcd") is None:
        pytest.fail(
            "etcd is not installed: run ./test.sh (it installs etcd-server) or apt-get install etcd-server"
        )
    with containers.etcd_server() as server:
        yield server


@pytest.fixture
def cluster_name() -> str:
    """A fresh cluster root per test, so tests sharing one etcd never see each other's keys."""
    return unique("t")


@pytest.fixture
async def etcd_store(etcd_server: EtcdProcess) -> AsyncIterator[EtcdStore]:
    store = EtcdStore([etcd_server.endpoint], request_timeout_s=5.0)
    await store.wait_ready(10)
    yield store
    await store.aclose()


@pytest.fixture
async def memory_store() -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    yield store
    await store.aclose()


@pytest.fixture
def keys(cluster_name: str) -> Keys:
    return Keys(cluster_name)


@pytest.fixture
def etcd_resources(etcd_store: EtcdStore, keys: Keys) -> Resources:
    return Resources(etcd_store, keys)
