"""Fixtures of the SDK tests: a fake cluster of two brokers on loopback, and a client of it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from danube_sdk import DanubeClient
from tests.unit.sdk.fake_broker import FakeCluster


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    fake = await FakeCluster(brokers=2, max_message_size_bytes=4096).start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def client(cluster: FakeCluster) -> AsyncIterator[DanubeClient]:
    c = DanubeClient(
        cluster.service_url, rpc_timeout_s=5.0, operation_timeout_s=10.0, health_check_interval_s=0
    )
    try:
        yield c
    finally:
        cluster.ack_gate.set()  # a failed test may leave acks held; let close() flush
        await c.close()
