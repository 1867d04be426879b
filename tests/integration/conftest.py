"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from danube_common.config import EtcdConfig
from danube_common.etcd_server import EtcdProcess
from danube_common.service import ServiceReady
from danube_lookup.app import running
from danube_lookup.config import LookupConfig


@pytest.fixture
async def lookup(etcd_server: EtcdProcess, cluster_name: str) -> AsyncIterator[ServiceReady]:
    """A lookup service in this event loop (client and admin ports on free loopback ports), on
    real etcd under a fresh cluster root."""
    cfg = LookupConfig(
        listen_addr="127.0.0.1:0",
        admin_listen_addr="127.0.0.1:0",
        etcd=EtcdConfig(endpoints=[etcd_server.endpoint], cluster=cluster_name),
    )
    async with running(cfg) as info:
        yield info
