"""Fixtures shared by every suite. Servers run on free loopback ports and are always stopped."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator

import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.metadata.memory import MemoryStore
from danube_common.resources import Resources
from tests.support import unique

# Keep gRPC away from any proxy configured on the machine: all traffic here is loopback.
for _var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "grpc_proxy"):
    os.environ.pop(_var, None)
os.environ.setdefault("no_proxy", "127.0.0.1,localhost")


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdProcess]:
    if shutil.which("etcd") is None:
        pytest.fail(
            "etcd is not installed: run ./test.sh (it installs etcd-server) or apt-get install etcd-server"
        )
    with EtcdProcess() as proc:
        yield proc


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
