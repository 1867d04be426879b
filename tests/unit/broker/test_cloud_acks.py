"""``cloud`` durability: a publish is acked only once the uploader says its batch is in object
storage. CloudAcks against a fake flusher, then the publish path through the registry."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

import pytest

from danube_broker.cloud import CloudAcks
from danube_broker.registry import BrokerRegistry
from danube_broker.tiering import Tiering
from danube_common.errors import Unavailable
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.resources import Resources
from tests.support import wait_until
from tests.unit.broker.fake_log import FakeLogs
from tests.unit.broker.helpers import BROKER_URL, Clock, config

pytestmark = pytest.mark.unit

TOPIC = "/default/cloudy"


class FakeFlusher:
    """Uploads up to ``min(up_to_offset, allowed)``: ``allowed`` is how far object storage got."""

    def __init__(self) -> None:
        self.allowed = 0
        self.uploaded = 0
        self.fail: Exception | None = None
        self.calls: list[tuple[float, int]] = []

    async def __call__(self, topic: str, up_to_offset: int) -> int:
        self.calls.append((time.monotonic(), up_to_offset))
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        self.uploaded = max(self.uploaded, min(up_to_offset, self.allowed))
        return self.uploaded

    # the UploaderClient interface, for Tiering
    async def flush(self, topic: str, up_to_offset: int = 0) -> int:
        return await self(topic, up_to_offset)

    async def aclose(self) -> None:
        pass


@pytest.fixture
async def resources(memory_store: MemoryStore) -> Resources:
    res = Resources(memory_store, Keys("unit"))
    await res.create_namespace("default")
    return res


# ---------------------------------------------------------------- CloudAcks
async def test_waiting_publishes_share_a_flush_and_are_released_by_the_checkpoint() -> None:
    flusher = FakeFlusher()
    flusher.allowed = 6
    acks = CloudAcks(TOPIC, flusher, lambda: 9, interval_s=0.05)
    runner = asyncio.create_task(acks.run())
    try:
        waits = {end: asyncio.create_task(acks.wait_uploaded(end)) for end in (3, 6, 9)}
        await wait_until(lambda: waits[3].done() and waits[6].done(), what="the first two acks")
        assert flusher.calls[0][1] == 9, "one Flush up to the durable offset for every waiting publish"
        assert not waits[9].done(), "offset 8 is not uploaded yet: no ack"
        assert acks.uploaded_next_offset == 6
        flusher.allowed = 9
        await wait_until(lambda: waits[9].done(), what="the last ack")
        starts = [t for t, _ in flusher.calls]
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert all(g >= 0.045 for g in gaps), f"at most one Flush per interval, got gaps {gaps}"
        await asyncio.wait_for(acks.wait_uploaded(5), 1)  # already uploaded: returns at once
    finally:
        runner.cancel()


async def test_a_failing_uploader_acks_nothing_until_it_recovers(caplog: pytest.LogCaptureFixture) -> None:
    flusher = FakeFlusher()
    flusher.allowed = 100
    flusher.fail = Unavailable("S3 refused the connection")
    acks = CloudAcks(TOPIC, flusher, lambda: 4, interval_s=0.01)
    runner = asyncio.create_task(acks.run())
    try:
        with caplog.at_level(logging.WARNING):
            waiting = asyncio.create_task(acks.wait_uploaded(4))
            await wait_until(lambda: acks.failures >= 3, what="failed flushes")
        assert not waiting.done(), "no ack while object storage fails"
        assert acks.waiting == 1 and "S3 refused" in acks.last_error
        assert any("wait for object storage" in r.getMessage() for r in caplog.records)
        flusher.fail = None
        await asyncio.wait_for(waiting, 10)
        assert acks.uploaded_next_offset == 4
    finally:
        runner.cancel()


async def test_closing_fails_the_waiting_publishes_with_a_retryable_error() -> None:
    flusher = FakeFlusher()
    acks = CloudAcks(TOPIC, flusher, lambda: 4, interval_s=0.01)
    runner = asyncio.create_task(acks.run())
    try:
        waiting = asyncio.create_task(acks.wait_uploaded(4))
        await wait_until(lambda: flusher.calls, what="a flush")
        acks.close(Unavailable("topic closed"))
        with pytest.raises(Unavailable):
            await waiting
        with pytest.raises(Unavailable):
            await acks.wait_uploaded(10)
    finally:
        runner.cancel()


# ---------------------------------------------------------------- the publish path
class Rig:
    def __init__(self, resources: Resources, uploader: FakeFlusher | None, **cfg: Any) -> None:
        base: dict[str, Any] = {"default_durability": "cloud", "cloud_flush_interval_ms": 10}
        base.update(cfg)
        self.cfg = config(**base)
        self.logs = FakeLogs()
        self.reg = BrokerRegistry(
            self.cfg, resources, broker_url=BROKER_URL, clock=Clock(), id_seed=1, open_log=self.logs
        )
        self.reg.set_tiering(Tiering(self.cfg, resources, objects=None, uploader=uploader))  # type: ignore[arg-type]

    async def publish(self, producer: Any, payloads: list[bytes]) -> Any:
        msgs = [pb.StreamMessage(payload=p) for p in payloads]
        return await self.reg.publish(producer, msgs, self.reg.payload_bytes(msgs))

    async def close(self) -> None:
        self.reg.close_all("test over")
        await self.reg.wait_closed()


async def test_a_cloud_publish_is_acked_only_once_its_batch_is_uploaded(resources: Resources) -> None:
    uploader = FakeFlusher()
    rig = Rig(resources, uploader)
    p = await rig.reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="reliable")
    pending = asyncio.create_task(rig.publish(p, [b"a", b"b", b"c"]))
    await wait_until(lambda: len(uploader.calls) >= 2, what="flushes")
    log = rig.logs.logs[next(iter(rig.logs.logs))]
    assert log.durable_offset == 3, "durable locally"
    assert not pending.done(), "but not acked before object storage has it"
    uploader.allowed = 2
    await wait_until(lambda: uploader.uploaded == 2, what="a partial upload")
    assert not pending.done(), "offset 2 is not uploaded: still no ack"
    uploader.allowed = 3
    result = await asyncio.wait_for(pending, 5)
    assert (result.first_offset, result.count) == (0, 3)
    stats = rig.reg.stats()[TOPIC].tiered
    assert stats is not None and stats.cloud_uploaded_next_offset == 3 and stats.cloud_flushes >= 1
    await rig.close()


async def test_a_failing_uploader_is_back_pressure_not_loss(resources: Resources) -> None:
    uploader = FakeFlusher()
    uploader.allowed = 1_000
    uploader.fail = Unavailable("object storage unreachable")
    rig = Rig(resources, uploader)
    p = await rig.reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="reliable")
    pending = [asyncio.create_task(rig.publish(p, [f"m{i}".encode()])) for i in range(5)]
    await wait_until(
        lambda: (s := rig.reg.stats()[TOPIC].tiered) is not None and s.cloud_flush_failures >= 3,
        what="failing flushes",
    )
    assert not any(t.done() for t in pending), "nothing acked while uploads fail"
    stats = rig.reg.stats()[TOPIC].tiered
    assert stats is not None and stats.cloud_waiting == 5 and "unreachable" in stats.last_cloud_error
    uploader.fail = None
    results = await asyncio.wait_for(asyncio.gather(*pending), 10)
    assert sorted(r.first_offset for r in results) == [0, 1, 2, 3, 4]
    await rig.close()


async def test_cloud_without_an_uploader_acts_as_fsync_and_says_so(
    resources: Resources, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(resources, None)
    with caplog.at_level(logging.WARNING):
        p = await rig.reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="reliable")
        result = await asyncio.wait_for(rig.publish(p, [b"x"]), 5)
    assert result.first_offset == 0
    warnings = [r.getMessage() for r in caplog.records if "durability cloud" in r.getMessage()]
    assert len(warnings) == 1 and "like durability fsync" in warnings[0]
    await rig.close()


async def test_closing_a_topic_answers_waiting_cloud_publishes(resources: Resources) -> None:
    uploader = FakeFlusher()
    rig = Rig(resources, uploader)
    p = await rig.reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="reliable")
    pending = asyncio.create_task(rig.publish(p, [b"a"]))
    await wait_until(lambda: uploader.calls, what="a flush")
    await rig.close()
    with pytest.raises(Unavailable):
        await asyncio.wait_for(pending, 5)
