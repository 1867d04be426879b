"""The ``danube-secure`` and ``danube-tls`` bench drivers: a secured local cluster starts, a
reliable topic round-trips over TLS (also through ``attach``, as in a client worker process),
nothing is left running; with ``danube-secure`` the clients hold the narrow producer and consumer
tokens and RBAC really decides (the producer's token may not subscribe), with ``danube-tls`` no
token is sent and none is needed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.drivers import make_driver
from bench.drivers.danube_secure import DanubeSecureDriver
from danube_sdk import PermissionDenied, SubType
from tests.integration.test_bench_peer_drivers import _alive

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

N = 200
TOPIC = "bench-secure"


async def _round_trip(driver: DanubeSecureDriver) -> DanubeSecureDriver:
    """Produce N messages from a client-only driver (attach), consume them with the driver's own
    client; returns the attached driver, still open."""
    await driver.create_topic(TOPIC, 1, reliable=True)  # the admin token (if any): set-up only
    consumer = await driver.consumer(TOPIC, "sub")
    worker_side = await type(driver).attach(driver.client_spec())
    assert isinstance(worker_side, DanubeSecureDriver)
    producer = await worker_side.producer(TOPIC)
    futures = [await producer.send(i.to_bytes(8, "little") + b"x" * 92) for i in range(N)]
    await producer.flush()
    await asyncio.gather(*futures)
    got: list[bytes] = []
    while len(got) < N:
        got += await asyncio.wait_for(consumer.receive(), 10)
    assert sorted(int.from_bytes(p[:8], "little") for p in got) == list(range(N))
    await producer.close()
    await consumer.close()
    return worker_side


@pytest.mark.parametrize("name", ["danube-secure", "danube-tls"])
async def test_secure_driver_round_trip(tmp_path: Path, name: str) -> None:
    driver = make_driver(name)
    assert isinstance(driver, DanubeSecureDriver)
    await driver.start(tmp_path)
    pids = driver.server_pids()
    assert pids
    try:
        spec = driver.client_spec()
        assert spec["service_url"].startswith("https://")
        assert ("producer_token_file" in spec) is driver.auth
        worker_side = await _round_trip(driver)
        try:
            if driver.auth:  # not a super admin: the producer's token holds produce, not consume
                with pytest.raises(PermissionDenied, match="user:demo-producer"):
                    await (await worker_side._producer_client()).subscribe(
                        f"/default/{TOPIC}", subscription="sneaky", sub_type=SubType.SHARED
                    )
        finally:
            await worker_side.stop()
    finally:
        await driver.stop()
        await driver.stop()  # idempotent
    assert not [p for p in pids if _alive(p)]
