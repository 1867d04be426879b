"""The peer drivers (NATS, RabbitMQ, Redis Streams): name mapping without servers, and a smoke run per
against the real servers (``slow``; skipped when scripts/setup_bench.sh has not installed them)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from bench.drivers import nats as nats_driver
from bench.drivers import rabbitmq as rabbit_driver
from bench.drivers import redis_streams as redis_driver
from bench.drivers.base import Driver


@pytest.mark.unit
@pytest.mark.parametrize(
    ("topic", "stream", "prefix"),
    [
        ("/default/orders", "default_orders", "bench.default.orders"),
        ("/default/a.b c", "default_a_b_c", "bench.default.a_b_c"),
    ],
)
def test_nats_names(topic: str, stream: str, prefix: str) -> None:
    assert nats_driver.stream_name(topic) == stream
    assert nats_driver.subject_prefix(topic) == prefix
    assert nats_driver.partition_subjects(topic, 2) == [f"{prefix}.0", f"{prefix}.1"]
    assert nats_driver.partition_subjects(topic, 0) == [f"{prefix}.0"]


@pytest.mark.unit
def test_rabbit_names() -> None:
    assert rabbit_driver.exchange_name("/default/orders") == "bench.default.orders"
    assert rabbit_driver.queue_names("/default/orders", "sub-1", 2) == [
        "bench.default.orders.sub-1.0",
        "bench.default.orders.sub-1.1",
    ]


@pytest.mark.unit
def test_names_reject_empty() -> None:
    with pytest.raises(ValueError):
        nats_driver.stream_name("/")
    with pytest.raises(ValueError):
        rabbit_driver.exchange_name("//")


def _nats_installed() -> bool:
    return shutil.which("nats-server") is not None and nats_driver._IMPORT_ERROR is None


def _rabbit_installed() -> bool:
    return (rabbit_driver.RABBIT_BIN_DIR / "rabbitmq-server").exists() and rabbit_driver._IMPORT_ERROR is None


async def _round_trip(
    driver: Driver, workdir: Path, *, reliable: bool, partitions: int, n: int = 500
) -> None:
    await driver.start(workdir)
    await driver.start(workdir)  # idempotent
    pids = driver.server_pids()
    assert pids
    try:
        topic = "/default/smoke"
        await driver.create_topic(topic, partitions, reliable=reliable)
        consumer = await driver.consumer(topic, "sub")
        producer = await driver.producer(topic)
        futures = [await producer.send(i.to_bytes(8, "little") + b"x" * 92) for i in range(n)]
        await producer.flush()
        await asyncio.gather(*futures)
        got: list[bytes] = []
        while len(got) < n:
            got += await asyncio.wait_for(consumer.receive(), 10)
        assert sorted(int.from_bytes(p[:8], "little") for p in got) == list(range(n))
        await producer.close()
        await consumer.close()
    finally:
        await driver.stop()
        await driver.stop()  # idempotent
    assert not [p for p in pids if _alive(p)]


def _alive(pid: int) -> bool:
    """Running and not a zombie (read from /proc, so the test needs no psutil)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(60)
@pytest.mark.skipif(
    not _nats_installed(), reason="nats-server / nats-py not installed: scripts/setup_bench.sh"
)
@pytest.mark.parametrize(("reliable", "partitions"), [(True, 1), (False, 3)])
async def test_nats_jetstream_round_trip(tmp_path: Path, reliable: bool, partitions: int) -> None:
    await _round_trip(nats_driver.NatsJetStreamDriver(), tmp_path, reliable=reliable, partitions=partitions)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(60)
@pytest.mark.skipif(
    not _nats_installed(), reason="nats-server / nats-py not installed: scripts/setup_bench.sh"
)
async def test_nats_core_round_trip(tmp_path: Path) -> None:
    await _round_trip(nats_driver.NatsCoreDriver(), tmp_path, reliable=False, partitions=2)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(180)
@pytest.mark.skipif(
    not _rabbit_installed(), reason="rabbitmq-server / aiormq not installed: scripts/setup_bench.sh"
)
@pytest.mark.parametrize(("reliable", "partitions"), [(True, 1), (False, 3)])
async def test_rabbitmq_round_trip(tmp_path: Path, reliable: bool, partitions: int) -> None:
    await _round_trip(rabbit_driver.RabbitMqDriver(), tmp_path, reliable=reliable, partitions=partitions)


# ---- Redis Streams


@pytest.mark.unit
def test_redis_names() -> None:
    assert redis_driver.stream_keys("/default/orders", 2) == [
        "bench:default:orders:0",
        "bench:default:orders:1",
    ]
    assert redis_driver.stream_keys("/default/a.b c", 0) == ["bench:default:a_b_c:0"]
    assert redis_driver.group_name("sub-1") == "sub-1"
    assert redis_driver.read_count(1) == 1000
    assert redis_driver.read_count(16) == 62
    with pytest.raises(ValueError):
        redis_driver.stream_keys("//", 1)


@pytest.mark.unit
def test_redis_server_args(tmp_path: Path) -> None:
    always = redis_driver.server_args("redis-server", 7000, tmp_path, appendfsync="always")
    assert always[always.index("--appendonly") + 1] == "yes"
    assert always[always.index("--appendfsync") + 1] == "always"
    assert always[always.index("--save") + 1] == ""  # no RDB snapshots
    assert always[always.index("--bind") + 1] == "127.0.0.1"
    memory = redis_driver.server_args("redis-server", 7000, tmp_path, appendfsync=None)
    assert memory[memory.index("--appendonly") + 1] == "no"
    assert "--appendfsync" not in memory


def _redis_installed() -> bool:
    return shutil.which("redis-server") is not None and redis_driver._IMPORT_ERROR is None


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(30)
@pytest.mark.skipif(
    not _redis_installed(), reason="redis-server / redis (PyPI) not installed: scripts/setup_bench.sh"
)
@pytest.mark.parametrize(("reliable", "partitions"), [(True, 1), (False, 3)])
async def test_redis_streams_round_trip(tmp_path: Path, reliable: bool, partitions: int) -> None:
    await _round_trip(redis_driver.RedisStreamsDriver(), tmp_path, reliable=reliable, partitions=partitions)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(30)
@pytest.mark.skipif(
    not _redis_installed(), reason="redis-server / redis (PyPI) not installed: scripts/setup_bench.sh"
)
async def test_redis_streams_acks_and_attach(tmp_path: Path) -> None:
    """Reliable: the AOF server runs with appendfsync always; a consumer attached from the client spec
    (as in a worker process) receives every entry, and its XACKs leave nothing pending."""
    driver = redis_driver.RedisStreamsDriver()
    await driver.start(tmp_path)
    try:
        topic = "/default/acks"
        await driver.create_topic(topic, 2, reliable=True)
        client = redis_driver._client(driver._ports[True])
        try:
            assert await client.config_get("appendfsync") == {"appendfsync": "always"}
            assert await client.config_get("appendonly") == {"appendonly": "yes"}
            attached = await redis_driver.RedisStreamsDriver.attach(driver.client_spec())
            consumer = await attached.consumer(topic, "sub")
            producer = await attached.producer(topic)
            n = 300
            futures = [await producer.send(i.to_bytes(8, "little")) for i in range(n)]
            await asyncio.gather(*futures)
            got: list[bytes] = []
            while len(got) < n:
                got += await asyncio.wait_for(consumer.receive(), 10)
            assert sorted(int.from_bytes(p, "little") for p in got) == list(range(n))
            assert [await client.xlen(k) for k in redis_driver.stream_keys(topic, 2)] == [150, 150]
            await consumer.close()  # sends the acks of the last batch
            await producer.close()
            for key in redis_driver.stream_keys(topic, 2):
                assert (await client.xpending(key, "sub"))["pending"] == 0
            await attached.stop()
            assert driver.server_pids()  # an attached driver stops no server
        finally:
            await client.aclose()
    finally:
        await driver.stop()
