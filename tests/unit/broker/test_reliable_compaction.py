"""Compaction on a reliable topic through the registry (in-memory metadata, fake logs): the
compacted subscription and reader, the stored record, the threshold policy, retention held
at the horizon."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from danube_broker.dispatch.base import SubType
from danube_broker.metrics import BrokerEvents
from danube_broker.reader import ReaderStart
from danube_broker.registry import BrokerRegistry
from danube_common.errors import FailedPrecondition, StorageError
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.resources import Resources
from tests.support import wait_until
from tests.unit.broker.fake_log import FakeLogs
from tests.unit.broker.helpers import BROKER_URL, Clock, config
from tests.unit.broker.test_reliable_topic import TOPIC, Rig, T, received

pytestmark = pytest.mark.unit


@pytest.fixture
async def resources(memory_store: MemoryStore) -> Resources:
    res = Resources(memory_store, Keys("unit"))
    await res.create_namespace("default")
    return res


def rig_at(resources: Resources, tmp_path: Path, logs: FakeLogs | None = None, **cfg: Any) -> Rig:
    return Rig(resources, logs, data_dir=str(tmp_path), **cfg)


async def publish_keyed(rig: Rig, producer: Any, pairs: list[tuple[str | None, bytes]]) -> None:
    msgs = []
    for key, payload in pairs:
        m = pb.StreamMessage(payload=payload)
        if key is not None:
            m.routing_key = key
        msgs.append(m)
    await rig.reg.publish(producer, msgs, rig.reg.payload_bytes(msgs), stream=None)


def offsets(msgs: list[pb.StreamMessage]) -> list[int]:
    return [m.msg_id.topic_offset for m in msgs]


TABLE = [("a", b"1"), ("b", b"1"), ("a", b"2"), (None, b"x"), ("b", b""), ("c", b"1")]


async def test_a_compacted_subscription_keeps_its_setting_and_reads_the_view_after_a_restart(
    resources: Resources, tmp_path: Path
) -> None:
    logs = FakeLogs()
    rig = rig_at(resources, tmp_path, logs)
    p = await rig.producer()
    await publish_keyed(rig, p, TABLE)
    rt = rig.topic.reliable
    assert rt is not None and rt.compaction_info() is None
    info = await rt.compact()
    assert (info.horizon, info.keys, info.entries) == (6, 2, 2)
    stored = await rig.stored(rig.keys.compaction(T))
    assert stored["horizon"] == 6 and stored["stored_in"] == "local disk"
    await publish_keyed(rig, p, [("a", b"3")])
    view = await rig.subscribe("view", initial_position="earliest", read_compacted=True)
    assert offsets(await received(view, 3)) == [2, 5, 6]
    assert (await rig.stored(rig.keys.subscription(T, "view")))["read_compacted"] is True
    everything = await rig.subscribe("all", initial_position="earliest")
    assert offsets(await received(everything, 7)) == list(range(7))
    assert "read_compacted" not in await rig.stored(rig.keys.subscription(T, "all"))
    await rig.close()

    again = rig_at(resources, tmp_path, logs)
    assert again.reg is not rig.reg
    # The same subscription without the flag: it keeps what it was created with.
    c = await again.subscribe("view", name="c2", initial_position="earliest")
    assert offsets(await received(c, 3)) == [2, 5, 6], "nothing acked: the view again, from etcd + disk"
    reliable = again.topic.reliable
    assert reliable is not None and reliable.compaction_info() == info
    await again.close()


async def test_a_reader_reads_the_view_when_it_asks(resources: Resources, tmp_path: Path) -> None:
    rig = rig_at(resources, tmp_path)
    p = await rig.producer()
    await publish_keyed(rig, p, TABLE)
    rt = rig.topic.reliable
    assert rt is not None
    await rt.compact()
    reader = await rig.subscribe("r1", reader=ReaderStart("earliest"), read_compacted=True)
    assert offsets(await received(reader, 2)) == [2, 5]
    plain = await rig.subscribe("r2", reader=ReaderStart("earliest"))
    assert offsets(await received(plain, 6)) == list(range(6))
    await rig.close()


async def test_read_compacted_is_refused_on_a_non_reliable_topic(
    resources: Resources, tmp_path: Path
) -> None:
    rig = rig_at(resources, tmp_path)
    await rig.reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="non_reliable")
    with pytest.raises(FailedPrecondition, match="compacted"):
        await rig.subscribe("s", read_compacted=True)
    await rig.close()


async def test_the_threshold_compacts_in_the_retention_sweep_and_holds_retention_at_the_horizon(
    resources: Resources, tmp_path: Path
) -> None:
    rig = rig_at(resources, tmp_path, FakeLogs(segment_entries=4), compaction_threshold_bytes=1_000)
    p = await rig.producer()
    sub = await rig.subscribe("s", kind=SubType.SHARED, initial_position="earliest")
    rt = rig.topic.reliable
    assert rt is not None and rt.policies.compaction_threshold_bytes == 1_000
    await publish_keyed(rig, p, [(f"k{i % 3}", b"x" * 100) for i in range(9)])  # 900 bytes
    rig.reg.ack(TOPIC, "s", offsets(await received(sub, 9)))
    await wait_until(lambda: rt._persisted == {"s": 8}, what="cursor flushed")
    await rt.apply_retention()
    assert rt.compaction_info() is None, "below the threshold: not compacted"
    assert rig.log.first_offset == 0, "nothing compacted: retention keeps the only copy"

    await publish_keyed(rig, p, [("k0", b"x" * 100), ("k1", b"x" * 100)])  # 1,100 bytes since
    rig.reg.ack(TOPIC, "s", offsets(await received(sub, 2)))
    await wait_until(lambda: rt._persisted == {"s": 10}, what="cursor flushed")
    await rt.apply_retention()  # starts the compaction, in the background
    await wait_until(lambda: rt.compaction_info() is not None, what="compacted")
    info = rt.compaction_info()
    assert info is not None and info.horizon == 11 and info.keys == 3
    await rt.apply_retention()
    assert rig.log.first_offset == 8, "acknowledged and compacted: whole segments go"
    view = await rig.subscribe("view", initial_position="earliest", read_compacted=True)
    assert offsets(await received(view, 3)) == [8, 9, 10]

    rt.set_compaction_threshold(0)
    assert rt._retention_cap() is None, "no threshold: retention is not held by compaction"
    await rig.close()


async def test_without_a_threshold_retention_is_not_held(resources: Resources, tmp_path: Path) -> None:
    rig = rig_at(resources, tmp_path, FakeLogs(segment_entries=4))
    p = await rig.producer()
    sub = await rig.subscribe("s", kind=SubType.SHARED, initial_position="earliest")
    await publish_keyed(rig, p, [(f"k{i}", b"x") for i in range(9)])
    rig.reg.ack(TOPIC, "s", offsets(await received(sub, 9)))
    rt = rig.topic.reliable
    assert rt is not None
    await wait_until(lambda: rt._persisted == {"s": 8}, what="cursor flushed")
    await rt.apply_retention()
    assert rig.log.first_offset == 8 and rt.compaction_info() is None
    await rig.close()


async def test_compactions_are_counted_in_the_metrics(resources: Resources, tmp_path: Path) -> None:
    metrics = CollectorRegistry()
    reg = BrokerRegistry(
        config(data_dir=str(tmp_path)),
        resources,
        broker_url=BROKER_URL,
        clock=Clock(),
        id_seed=1,
        open_log=FakeLogs(),
        events=BrokerEvents(metrics),
    )
    p = await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="reliable")
    msgs = [pb.StreamMessage(payload=b"v", routing_key="k")]
    await reg.publish(p, msgs, reg.payload_bytes(msgs))
    rt = reg.topics[TOPIC].reliable
    assert rt is not None
    await rt.compact()
    assert metrics.get_sample_value("danube_compactions_total", {"outcome": "ok"}) == 1
    assert metrics.get_sample_value("danube_compaction_duration_seconds_count") == 1
    topic_dir = tmp_path / "default" / "orders"
    for f in topic_dir.iterdir():
        f.unlink()
    topic_dir.rmdir()
    topic_dir.write_bytes(b"")  # where the topic's directory was: the view cannot be written
    await reg.publish(p, msgs, reg.payload_bytes(msgs))
    with pytest.raises(StorageError, match="compacted view"):
        await rt.compact()
    assert metrics.get_sample_value("danube_compactions_total", {"outcome": "failed"}) == 1
    assert rt.compaction_info() is not None and rt.compaction_info().horizon == 1  # type: ignore[union-attr]
    reg.close_all("test over")
    await reg.wait_closed()


async def test_a_compaction_outlives_a_caller_that_gives_up_and_is_shared_by_callers_at_once(
    resources: Resources, tmp_path: Path
) -> None:
    rig = rig_at(resources, tmp_path)
    p = await rig.producer()
    await publish_keyed(rig, p, TABLE)
    rt = rig.topic.reliable
    assert rt is not None
    runs: list[int] = []  # the end each compaction was asked to reach
    run = rt.compaction.compact

    async def counted(log_: Any, end: int) -> Any:
        runs.append(end)
        return await run(log_, end)

    rt.compaction.compact = counted  # type: ignore[method-assign]
    caller = asyncio.create_task(rt.compact())
    await asyncio.sleep(0)  # the compaction is under way
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await wait_until(
        lambda: rt.compaction_info() is not None, what="the compaction finished without its caller"
    )
    assert runs == [6]

    await publish_keyed(rig, p, [("a", b"4")])
    first, second = await asyncio.gather(rt.compact(), rt.compact())
    assert first == second and first.horizon == 7 and runs == [6, 7], "one compaction for both"
    await rig.close()


async def test_the_retention_sweep_never_waits_for_a_compaction_nor_dies_with_one(
    resources: Resources, tmp_path: Path
) -> None:
    """A slow compaction (its record write held here) does not hold the broker's maintenance
    loop, and the topic closing while it runs (the compaction is cancelled) leaves the loop
    running: it writes every topic's cursors and runs retention."""
    rig = rig_at(resources, tmp_path, compaction_threshold_bytes=100)
    p = await rig.producer()
    rt = rig.topic.reliable
    assert rt is not None
    gate = asyncio.Event()
    write = rt.compaction._write_record

    async def held(value: dict[str, Any]) -> None:
        await gate.wait()
        await write(value)

    rt.compaction._write_record = held
    await publish_keyed(rig, p, [("a", b"x" * 200)])
    maintenance = rig.reg.reliable.maintenance
    await asyncio.wait_for(maintenance.sweep(), 5)  # started the compaction, did not wait for it
    running = rt._compacting
    assert running is not None and not running.done()
    loop_task = maintenance._task
    assert loop_task is not None
    rt.stop()  # the topic closing: its compaction is cancelled
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.wait_for(maintenance.sweep(), 5)
    await asyncio.sleep(0.05)
    assert not loop_task.done(), "the maintenance loop goes on"
    await rig.close()
