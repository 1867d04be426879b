"""Reliable topics through the registry, on the in-memory metadata store and fake logs:
publish path (durability, dedup, storage errors), durable subscriptions, cursors, fencing,
policies, retention."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from danube_broker.consumer import Consumer
from danube_broker.dispatch.base import PublishStream, SubType
from danube_broker.dispatch.reliable.dedup import Dedup, original_offset
from danube_broker.registry import BrokerRegistry
from danube_broker.stats import TopicStats
from danube_broker.topic import Topic
from danube_broker.wal import DiskFull, Durability, StorageFailed
from danube_common.errors import FailedPrecondition, TopicNotOwned
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.metadata.store import Op
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.support import wait_until
from tests.unit.broker.fake_log import FakeLog, FakeLogs
from tests.unit.broker.helpers import BROKER_URL, Clock, config

pytestmark = pytest.mark.unit

TOPIC = "/default/orders"
T = TopicName.parse(TOPIC)


@pytest.fixture
async def resources(memory_store: MemoryStore) -> Resources:
    res = Resources(memory_store, Keys("unit"))
    await res.create_namespace("default")
    return res


class Rig:
    def __init__(self, resources: Resources, logs: FakeLogs | None = None, **cfg: Any) -> None:
        self.res = resources
        self.keys = resources.keys
        self.logs = logs or FakeLogs()
        self.clock = Clock()
        base: dict[str, Any] = {"cursor_flush_interval_ms": 1}
        base.update(cfg)
        self.reg = BrokerRegistry(
            config(**base), resources, broker_url=BROKER_URL, clock=self.clock, id_seed=1, open_log=self.logs
        )

    @property
    def topic(self) -> Topic:
        return self.reg.topics[TOPIC]

    @property
    def log(self) -> FakeLog:
        reliable = self.topic.reliable
        assert reliable is not None
        return reliable.log  # type: ignore[return-value]

    async def producer(self, name: str = "p") -> Any:
        return await self.reg.create_producer(TOPIC, name, exclusive=False, dispatch_strategy="reliable")

    async def publish(
        self, producer: Any, payloads: list[bytes], seqs: list[int] | None = None, stream: Any = None
    ) -> Any:
        msgs = [pb.StreamMessage(payload=p) for p in payloads]
        for m, s in zip(msgs, seqs or [], strict=False):
            m.sequence_id = s
        return await self.reg.publish(producer, msgs, self.reg.payload_bytes(msgs), stream=stream)

    async def subscribe(
        self, sub: str = "s", name: str = "c", kind: SubType = SubType.EXCLUSIVE, **kw: Any
    ) -> Consumer:
        c = await self.reg.subscribe(TOPIC, subscription=sub, consumer_name=name, sub_type=kind, **kw)
        c.open_stream()
        return c

    async def stored(self, key: str) -> Any:
        return await self.res.store.get_json(key)

    async def close(self) -> None:
        self.reg.close_all("test over")
        await self.reg.wait_closed()


async def received(c: Consumer, n: int) -> list[pb.StreamMessage]:
    got: list[pb.StreamMessage] = []

    def more() -> bool:
        got.extend(c.queue.take(1000))
        return len(got) >= n

    await wait_until(more, what=f"{n} messages")
    return got


# ---------------------------------------------------------------- publish path
async def test_publish_returns_only_once_the_batch_is_durable(resources: Resources) -> None:
    rig = Rig(resources, FakeLogs(auto_commit=False))
    p = await rig.producer()
    c = await rig.subscribe()
    pending = asyncio.create_task(rig.publish(p, [b"a", b"b"]))
    await wait_until(lambda: rig.log.next_offset == 2, what="appended")
    await asyncio.sleep(0)
    assert not pending.done() and len(c.queue) == 0, "no ack and no delivery before durability"
    rig.log.commit()
    result = await pending
    assert (result.first_offset, result.count, result.offsets) == (0, 2, None)
    got = await received(c, 2)
    stored = pb.StreamMessage.FromString(rig.log.read(0, 1)[0].record)  # type: ignore[index]
    assert stored.msg_id.topic_offset == 0 and stored.msg_id.producer_id == p.id
    assert stored.msg_id.topic_name == TOPIC and stored.msg_id.broker_addr == BROKER_URL
    assert [m.payload for m in got] == [b"a", b"b"]
    await rig.close()


async def test_concurrent_publishes_enter_the_log_in_call_order_and_fail_with_their_commit(
    resources: Resources,
) -> None:
    rig = Rig(resources, FakeLogs(auto_commit=False))
    p = await rig.producer()
    a = asyncio.create_task(rig.publish(p, [b"a1", b"a2"], seqs=[1, 2]))
    b = asyncio.create_task(rig.publish(p, [b"b"], seqs=[3]))
    await wait_until(lambda: rig.log.next_offset == 3, what="both appended before either is durable")
    rig.log.commit()
    assert ((await a).first_offset, (await b).first_offset) == (0, 2)
    c = asyncio.create_task(rig.publish(p, [b"c"], seqs=[4]))
    d = asyncio.create_task(rig.publish(p, [b"d"], seqs=[5]))
    await wait_until(lambda: rig.log.next_offset == 5, what="both appended")
    rig.log.fail_pending(StorageFailed("disk gone"))
    for t in (c, d):
        with pytest.raises(StorageFailed):
            await t
    assert rig.reg.last_sequence(p) == 3, "the failed commit's sequence ids are taken back"
    again = asyncio.create_task(rig.publish(p, [b"c", b"d"], seqs=[4, 5]))
    await wait_until(lambda: rig.log.next_offset == 5, what="re-sent")
    rig.log.commit()
    res = await again
    assert (res.first_offset, res.count, res.duplicates) == (3, 2, 0), "re-sends are new, not duplicates"
    await rig.close()


async def test_duplicates_are_acked_with_their_original_offsets(resources: Resources) -> None:
    rig = Rig(resources)
    p = await rig.producer()
    first = await rig.publish(p, [b"1", b"2", b"3"], seqs=[1, 2, 3])
    assert (first.first_offset, first.count, first.duplicates) == (0, 3, 0)
    again = await rig.publish(p, [b"2", b"3", b"4", b"5"], seqs=[2, 3, 4, 5])
    assert list(again.offsets) == [1, 2, 3, 4] and again.duplicates == 2 and again.count == 4
    assert rig.log.next_offset == 5, "the duplicates were not stored again"
    inner = await rig.publish(p, [b"6", b"6"], seqs=[6, 6])
    assert list(inner.offsets) == [5, 5] and inner.duplicates == 1
    plain = await rig.publish(p, [b"x"])
    assert plain.offsets is None and plain.first_offset == 6
    assert rig.reg.last_sequence(p) == 6
    await rig.close()


async def test_after_a_restart_duplicates_are_found_in_the_log_tail(resources: Resources) -> None:
    logs = FakeLogs()
    rig = Rig(resources, logs)
    await rig.publish(await rig.producer(), [b"1", b"2", b"3"], seqs=[1, 2, 3])
    await rig.close()
    rig2 = Rig(resources, logs)
    p = await rig2.producer()
    assert rig2.reg.last_sequence(p) == 3, "what CreateProducer answers as last_sequence_id"
    res = await rig2.publish(p, [b"2", b"3", b"4"], seqs=[2, 3, 4])
    assert list(res.offsets) == [1, 2, 3] and res.duplicates == 2
    assert rig2.log.next_offset == 4
    await rig2.close()


async def test_forgotten_sequence_ids_get_the_unknown_offset() -> None:
    dedup = Dedup(lambda name: 0, recent_per_producer=2)
    msgs = [pb.StreamMessage(sequence_id=s) for s in (1, 2, 3)]
    first = dedup.split("p", msgs)
    assert len(first.new) == 3 and not first.duplicates
    again = dedup.split("p", [pb.StreamMessage(sequence_id=s) for s in (1, 3)])
    assert again.new == [] and [(i, w is None) for i, w in again.duplicates] == [(0, True), (1, False)]
    dedup.seed("p", [(1, 10), (3, 99)])
    assert dedup.lookup("p", 3) != 99, "what is remembered wins over the log's tail"


async def test_a_stored_appends_entries_become_plain_offsets() -> None:
    """Remembered sequence ids must not keep their append (and its future) alive once it is
    stored: 16,384 per producer of those were the garbage collector's 0.5 s pauses."""
    dedup = Dedup(lambda name: 0)
    a = dedup.split("p", [pb.StreamMessage(sequence_id=s) for s in (1, 2)])
    b = dedup.split("p", [pb.StreamMessage(), pb.StreamMessage(sequence_id=3)])
    waiting = dedup.split("p", [pb.StreamMessage(sequence_id=2)]).duplicates[0][1]
    dedup.stored("p", a.append, 10)
    assert [dedup.lookup("p", s) for s in (1, 2)] == [10, 11]
    assert await original_offset(waiting) == 11, "a duplicate waiting on the append learns its offset"
    assert isinstance(dedup.lookup("p", 3), tuple), "an append not yet stored is still pending"
    dedup.stored("p", b.append, 12)
    assert dedup.lookup("p", 3) == 13, "its index counts every new message, with a sequence id or not"
    assert a.append.seqs is None and b.append.seqs is None


async def test_a_duplicate_of_a_message_still_being_committed_shares_its_fate(resources: Resources) -> None:
    rig = Rig(resources, FakeLogs(auto_commit=False))
    p = await rig.producer()
    original = asyncio.create_task(rig.publish(p, [b"1"], seqs=[1]))
    await wait_until(lambda: rig.log.next_offset == 1)
    resend = asyncio.create_task(rig.publish(p, [b"1"], seqs=[1]))
    await asyncio.sleep(0)
    assert not resend.done()
    rig.log.fail_pending(StorageFailed("fsync failed"))
    with pytest.raises(StorageFailed):
        await original
    with pytest.raises(StorageFailed):
        await resend
    rig.log.auto_commit = True
    res = await rig.publish(p, [b"1"], seqs=[1])
    assert res.first_offset == 0 and res.offsets is None, "after the failure the resend is stored"
    await rig.close()


async def test_storage_errors_refuse_the_batch_and_the_topic_keeps_serving(resources: Resources) -> None:
    rig = Rig(resources)
    p = await rig.producer()
    c = await rig.subscribe()
    await rig.publish(p, [b"ok"])
    rig.log.fail_next(DiskFull("disk full"))
    with pytest.raises(DiskFull) as err:
        await rig.publish(p, [b"lost"], seqs=[7])
    assert err.value.code == "DISK_FULL" and err.value.retryable
    assert rig.log.next_offset == 1
    res = await rig.publish(p, [b"again"], seqs=[7])
    assert res.first_offset == 1 and res.offsets is None
    assert [m.payload for m in await received(c, 2)] == [b"ok", b"again"]
    await rig.close()


# ---------------------------------------------------------------- durable subscriptions
async def test_subscription_metadata_and_initial_positions(resources: Resources) -> None:
    rig = Rig(resources, FakeLogs(segment_entries=2))
    p = await rig.producer()
    await rig.publish(p, [b"0", b"1", b"2"])
    latest = await rig.subscribe("late")
    earliest = await rig.subscribe("early", initial_position="earliest")
    meta = await rig.stored(rig.keys.subscription(T, "late"))
    assert meta["type"] == "Exclusive" and meta["initial_position"] == "latest" and meta["start_offset"] == 3
    assert (await rig.stored(rig.keys.subscription(T, "early")))["start_offset"] == 0
    assert await rig.stored(rig.keys.subscription_cursor(T, "late")) is None
    await rig.publish(p, [b"3"])
    assert [m.msg_id.topic_offset for m in await received(latest, 1)] == [3]
    assert [m.msg_id.topic_offset for m in await received(earliest, 4)] == [0, 1, 2, 3]
    await rig.close()


async def test_cursor_is_flushed_and_restored_on_reload(resources: Resources) -> None:
    logs = FakeLogs()
    rig = Rig(resources, logs)
    p = await rig.producer()
    c = await rig.subscribe(kind=SubType.SHARED)
    await rig.publish(p, [b"%d" % i for i in range(5)])
    await received(c, 5)
    rig.reg.ack(TOPIC, "s", [0, 1, 3])
    key = rig.keys.subscription_cursor(T, "s")
    await wait_until(lambda: rig.stored(key), what="cursor flushed")
    # The cursor, and the ack above the gap at 2 with it.
    assert await rig.stored(key) == {"cursor": 1, "acked": [[3, 3]]}
    await rig.close()

    rig2 = Rig(resources, logs)
    c2 = await rig2.subscribe(kind=SubType.SHARED)
    got = await received(c2, 2)
    assert [m.msg_id.topic_offset for m in got] == [2, 4]  # 3 was acknowledged: not again
    engine = rig2.topic.subscriptions["s"].engine
    assert engine is not None and engine.backlog() == 2
    rig2.reg.ack(TOPIC, "s", [2, 4])
    await wait_until(
        lambda: engine.cursor == 4 and engine.acks.ranges == 0, what="the gap closed over the restored ack"
    )

    async def written_without_ranges() -> bool:
        return await rig2.stored(key) == {"cursor": 4}

    await wait_until(written_without_ranges, what="the cursor written without ranges")
    await rig2.close()


async def test_restore_happens_when_the_watch_loads_the_topic(resources: Resources) -> None:
    logs = FakeLogs()
    rig = Rig(resources, logs)
    await rig.publish(await rig.producer(), [b"a"])
    await rig.subscribe("s1", initial_position="earliest")
    await rig.close()
    rig2 = Rig(resources, logs)
    own = await resources.assign_if_unowned(T, "b1")
    rig2.reg.on_assigned(T, own.epoch)
    await wait_until(lambda: "s1" in rig2.topic.subscriptions, what="subscription restored")
    engine = rig2.topic.subscriptions["s1"].engine
    assert engine is not None and engine.cursor == -1
    await rig2.close()


async def test_a_stale_owner_cannot_move_a_cursor(resources: Resources) -> None:
    rig = Rig(resources)
    p = await rig.producer()
    c = await rig.subscribe()
    await rig.publish(p, [b"a", b"b"])
    await received(c, 2)
    key = rig.keys.subscription_cursor(T, "s")
    # someone else takes the topic over (the owner key moves on: a new epoch)
    await resources.store.txn([], [Op.put(rig.keys.owner(T), {"broker_id": "other"})])
    rig.reg.ack(TOPIC, "s", [0, 1])
    reliable = rig.topic.reliable
    assert reliable is not None
    await reliable.flush_cursors()
    assert await rig.stored(key) is None
    with pytest.raises(TopicNotOwned):
        await rig.subscribe("new-sub")
    await rig.close()


async def test_unsubscribe_deletes_metadata_and_cursor(resources: Resources) -> None:
    rig = Rig(resources)
    p = await rig.producer()
    c = await rig.subscribe()
    await rig.publish(p, [b"a"])
    await received(c, 1)
    rig.reg.ack(TOPIC, "s", [0])
    await wait_until(lambda: rig.stored(rig.keys.subscription_cursor(T, "s")))
    await rig.reg.close_consumer(c.id, unsubscribe=True)
    assert "s" not in rig.topic.subscriptions
    assert await rig.stored(rig.keys.subscription(T, "s")) is None
    assert await rig.stored(rig.keys.subscription_cursor(T, "s")) is None
    await rig.close()


async def test_idle_reliable_subscriptions_are_not_swept(resources: Resources) -> None:
    rig = Rig(resources, subscription_idle_timeout_s=1, consumer_reconnect_grace_s=1)
    await rig.producer()
    c = await rig.subscribe()
    session = c._session
    assert session is not None
    rig.reg.stream_closed(c, session)
    rig.clock.advance(100)
    rig.reg.sweep()
    assert c.id not in rig.reg.consumers and "s" in rig.topic.subscriptions
    await rig.close()


async def test_policy_changes_apply_at_once(resources: Resources) -> None:
    rig = Rig(resources)
    await rig.producer()
    await rig.subscribe()
    engine = rig.topic.subscriptions["s"].engine
    assert engine is not None and engine.policy.poison_policy == "block"
    key = rig.keys.subscription_policy(T, "s")
    await resources.store.put(key, json.dumps({"max_redeliveries": 4, "poison_policy": "drop"}))
    await wait_until(lambda: engine.policy.poison_policy == "drop", what="policy applied")
    assert engine.policy.max_redeliveries == 4
    await resources.store.put(key, json.dumps({"poison_policy": "nonsense"}))
    await resources.store.delete(key)
    await wait_until(lambda: engine.policy.poison_policy == "block", what="back to the defaults")
    await rig.close()


async def test_policies_read_again_replace_every_subscriptions_policy(resources: Resources) -> None:
    rig = Rig(resources)
    await rig.producer()
    await rig.subscribe()
    await rig.subscribe("other", name="c2")
    reliable = rig.topic.reliable
    assert reliable is not None
    engines = {n: rig.topic.subscriptions[n].engine for n in ("s", "other")}
    reliable.policies_reloaded({"s": {"poison_policy": "drop"}})
    assert engines["s"] is not None and engines["s"].policy.poison_policy == "drop"
    assert engines["other"] is not None and engines["other"].policy.poison_policy == "block"
    reliable.policies_reloaded({})  # the policy was deleted while the watch was compacted
    assert engines["s"].policy.poison_policy == "block"
    assert rig.reg.reliable.policy_watch.following == 1 and rig.reg.reliable.maintenance.topics == 1
    await rig.close()
    assert rig.reg.reliable.policy_watch.following == 0 and rig.reg.reliable.maintenance.topics == 0


async def test_cumulative_ack_refused_on_shared_and_seek_refused_on_non_reliable(
    resources: Resources,
) -> None:
    rig = Rig(resources)
    await rig.producer()
    await rig.subscribe("sh", kind=SubType.SHARED)
    with pytest.raises(FailedPrecondition, match="cumulative"):
        rig.reg.ack(TOPIC, "sh", [0], cumulative=True)
    other = await rig.reg.create_producer(
        "/default/plain", "p", exclusive=False, dispatch_strategy="non_reliable"
    )
    c = await rig.reg.subscribe(
        "/default/plain", subscription="s", consumer_name="c", sub_type=SubType.SHARED
    )
    assert other.topic.reliable is None
    with pytest.raises(FailedPrecondition, match="reliable"):
        await rig.reg.seek(c.id, offset=0, publish_time_ms=None)
    await rig.close()


# ---------------------------------------------------------------- retention and durability policies
async def test_retention_cuts_below_what_every_subscription_acked(resources: Resources) -> None:
    rig = Rig(resources, FakeLogs(segment_entries=4))
    p = await rig.producer()
    fast = await rig.subscribe("fast", kind=SubType.SHARED, initial_position="earliest")
    slow = await rig.subscribe("slow", kind=SubType.SHARED, initial_position="earliest")
    await rig.publish(p, [b"%d" % i for i in range(12)])
    await received(fast, 12)
    await received(slow, 12)
    rig.reg.ack(TOPIC, "fast", list(range(12)))
    rig.reg.ack(TOPIC, "slow", list(range(9)))
    reliable = rig.topic.reliable
    assert reliable is not None
    await wait_until(lambda: reliable._persisted == {"fast": 11, "slow": 8}, what="cursors flushed")
    await reliable.apply_retention()
    assert rig.log.first_offset == 8, "whole segments below the slowest cursor + 1"
    await rig.close()


async def test_only_topics_with_a_sealed_segment_are_in_the_periodic_retention_sweep(
    resources: Resources,
) -> None:
    rig = Rig(resources, FakeLogs(segment_entries=4))
    maintenance = rig.reg.reliable.maintenance
    p = await rig.producer()
    sub = await rig.subscribe("s", kind=SubType.SHARED, initial_position="earliest")
    await rig.publish(p, [b"a", b"b", b"c"])
    assert maintenance.topics == 1 and maintenance.retainable == 0  # one segment, nothing sealed
    await rig.publish(p, [b"%d" % i for i in range(6)])  # offsets 3..8: two segments sealed
    assert maintenance.retainable == 1
    await received(sub, 9)
    rig.reg.ack(TOPIC, "s", list(range(9)))
    # The cursor flush runs retention on the topic: everything below the active segment goes,
    # and with nothing sealed left the topic leaves the periodic sweep.
    await wait_until(
        lambda: rig.log.first_offset == 8 and maintenance.retainable == 0, what="cut, out of the sweep"
    )
    await rig.close()
    assert maintenance.retainable == 0 and maintenance.topics == 0


async def test_topic_policies_choose_durability_and_retention(resources: Resources) -> None:
    rig = Rig(resources, FakeLogs(segment_entries=4))
    await resources.create_topic(T, dispatch_strategy="reliable")
    rec = await resources.get_topic(T)
    assert rec is not None
    key = rig.keys.topic(T)
    await resources.store.put(
        key, {**rec.to_json(), "policies": {"durability": "none", "retention_time_s": 3600}}
    )
    p = await rig.producer()
    assert rig.logs.opened[-1][1] is Durability.NONE
    reliable = rig.topic.reliable
    assert reliable is not None and reliable.policies.retention_time_s == 3600
    await rig.publish(p, [b"%d" % i for i in range(12)])
    await reliable.apply_retention()
    assert rig.log.first_offset == 0, "no subscription, recent messages: kept for the retention time"
    await rig.close()


async def test_a_cancelled_publish_that_reached_the_log_makes_resends_duplicates(
    resources: Resources,
) -> None:
    rig = Rig(resources, FakeLogs(auto_commit=False))
    p = await rig.producer()
    gone = asyncio.create_task(rig.publish(p, [b"1"], seqs=[1]))
    await wait_until(lambda: rig.log.next_offset == 1)
    waiting_dup = asyncio.create_task(rig.publish(p, [b"1"], seqs=[1]))
    await asyncio.sleep(0)
    gone.cancel()  # the client went away; the WAL keeps the batch
    with pytest.raises(asyncio.CancelledError):
        await gone
    await asyncio.sleep(0.01)
    assert not waiting_dup.done(), "the duplicate waits for its original's commit"
    rig.log.commit()
    assert list((await waiting_dup).offsets) == [0], "and learns its offset"
    rig.log.auto_commit = True
    res = await rig.publish(p, [b"1"], seqs=[1])
    assert list(res.offsets) == [0] and rig.log.next_offset == 1, "stored once"
    await rig.close()


async def test_a_cancelled_publish_whose_commit_fails_lets_its_resend_be_stored(
    resources: Resources,
) -> None:
    """Found by the fault suite (disk full): the client gave up on a batch, the batch's commit
    then failed; its re-send must be stored, not acknowledged as a duplicate of nothing."""
    rig = Rig(resources, FakeLogs(auto_commit=False))
    p = await rig.producer()
    gone = asyncio.create_task(rig.publish(p, [b"1"], seqs=[1]))
    await wait_until(lambda: rig.log.next_offset == 1)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    rig.log.fail_pending(DiskFull("disk full"))
    await asyncio.sleep(0)
    rig.log.auto_commit = True
    res = await rig.publish(p, [b"1"], seqs=[1])
    assert res.duplicates == 0 and res.first_offset == 0 and rig.log.next_offset == 1
    await rig.close()


async def test_a_stream_never_stores_a_batch_after_an_earlier_refused_one(resources: Resources) -> None:
    """Per-producer order under storage faults: once a batch of a publish stream is refused, the
    stream's later batches are refused too (the client re-sends them all, in order)."""
    rig = Rig(resources, FakeLogs(auto_commit=False))
    p = await rig.producer()
    stream = PublishStream()
    a = asyncio.create_task(rig.publish(p, [b"a"], stream=stream))
    b = asyncio.create_task(rig.publish(p, [b"b"], stream=stream))
    await wait_until(lambda: rig.log.next_offset == 2, what="both queued")
    rig.log.fail_pending(DiskFull("disk full"))
    for t in (a, b):
        with pytest.raises(DiskFull):
            await t
    rig.log.auto_commit = True
    with pytest.raises(StorageFailed, match="keep the stream's order"):
        await rig.publish(p, [b"c"], stream=stream)  # the disk is fine again, but a/b came first
    assert (await rig.publish(p, [b"a"], stream=PublishStream())).first_offset == 0, "a new stream"

    # Refused at admission (no commit failed): the stream stays closed to later batches too.
    other = PublishStream()
    rig.log.fail_next(DiskFull("disk full"))
    with pytest.raises(DiskFull):
        await rig.publish(p, [b"x"], stream=other)
    with pytest.raises(StorageFailed):
        await rig.publish(p, [b"y"], stream=other)
    await rig.close()


def figures_of(st: TopicStats) -> tuple[int, ...]:
    """What the load report took from a stats snapshot before ``Topic.load_figures``."""
    backlog = sum(s.backlog for s in st.per_subscription.values())
    return (st.msgs_in, st.bytes_in, st.msgs_out, st.bytes_out, backlog, st.producers, st.consumers)


async def test_load_figures_are_what_the_stats_snapshot_says(resources: Resources) -> None:
    rig = Rig(resources)
    p = await rig.producer()
    c = await rig.subscribe()
    assert rig.topic.load_figures() == figures_of(rig.topic.stats())
    await rig.publish(p, [b"a", b"bb", b"ccc"])
    await received(c, 3)
    rig.reg.ack(TOPIC, "s", [0])
    figures = rig.topic.load_figures()
    assert figures == figures_of(rig.topic.stats())
    assert figures[0] == 3 and figures[4] == 2 and figures[5:] == (1, 1)  # in, backlog, producers, consumers
    await rig.close()


async def test_a_watched_topic_tells_the_load_report_when_messages_go_in_and_out(
    resources: Resources,
) -> None:
    """``Topic.watch_traffic`` (the load report's idle path): the next message in adds the topic's
    name, once; so does the next message handed to a subscription (here a redelivery: nothing
    came in)."""
    rig = Rig(resources)
    try:
        p = await rig.producer()
        c = await rig.subscribe()
        woken: set[str] = set()
        rig.topic.watch_traffic(woken)
        await rig.publish(p, [b"one"])
        (m,) = await received(c, 1)
        assert woken == {TOPIC} and rig.topic.counters.watch is None  # told once
        woken.clear()
        rig.topic.watch_traffic(woken)
        msgs_in = rig.topic.counters.msgs_in
        rig.reg.nack(TOPIC, "s", m.msg_id.topic_offset, delay_ms=0, reason="test")
        assert woken == {TOPIC}  # the nack itself
        woken.clear()
        rig.topic.watch_traffic(woken)
        await received(c, 1)
        assert woken == {TOPIC} and rig.topic.counters.msgs_in == msgs_in  # the redelivery
        woken.clear()
        rig.topic.watch_traffic(woken)
        rig.reg.ack(TOPIC, "s", [m.msg_id.topic_offset])
        assert woken == {TOPIC}  # an ack moves the backlog
        woken.clear()
        rig.topic.watch_traffic(woken)
        await rig.producer("another")
        assert woken == {TOPIC}  # a producer came
    finally:
        await rig.close()


# ---------------------------------------------------------------- publish without a task
class Outcome:
    """What ``publish_now`` reported through its ``done`` callback."""

    def __init__(self) -> None:
        self.fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.calls = 0

    def __call__(self, result: Any, error: BaseException | None) -> None:
        self.calls += 1
        if error is None:
            self.fut.set_result(result)
        else:
            self.fut.set_exception(error)


def publish_now(
    rig: Rig, producer: Any, payloads: list[bytes], seqs: list[int], stream: PublishStream
) -> Outcome | None:
    msgs = [pb.StreamMessage(payload=p, sequence_id=s) for p, s in zip(payloads, seqs, strict=True)]
    out = Outcome()
    taken = rig.reg.publish_now(producer, msgs, rig.reg.payload_bytes(msgs), stream, out)
    return out if taken else None


async def test_publish_now_answers_once_durable_as_publish_does(resources: Resources) -> None:
    rig = Rig(resources, FakeLogs(auto_commit=False))
    p = await rig.producer()
    c = await rig.subscribe()
    stream = PublishStream()
    first = publish_now(rig, p, [b"a", b"b"], [1, 2], stream)
    second = publish_now(rig, p, [b"c"], [3], stream)
    assert first is not None and second is not None
    assert rig.log.next_offset == 3, "queued in call order, at the call"
    await asyncio.sleep(0.01)
    assert not first.fut.done() and len(c.queue) == 0, "no answer and no delivery before durability"
    rig.log.commit()
    a, b = await first.fut, await second.fut
    assert (a.first_offset, a.count, b.first_offset, b.count) == (0, 2, 2, 1)
    assert first.calls == second.calls == 1
    assert [m.payload for m in await received(c, 3)] == [b"a", b"b", b"c"]
    stored = pb.StreamMessage.FromString(rig.log.read(0, 1)[0].record)  # type: ignore[index]
    assert stored.msg_id.topic_offset == 0 and stored.msg_id.producer_id == p.id
    assert rig.reg.last_sequence(p) == 3 and p.topic.stats().msgs_in == 3
    await rig.close()


async def test_publish_now_declines_what_needs_a_task_and_leaves_no_trace(resources: Resources) -> None:
    rig = Rig(resources)
    p = await rig.producer()
    await rig.publish(p, [b"1", b"2"], seqs=[1, 2])
    stream = PublishStream()
    # A duplicate: the task looks up its original's offset.
    assert publish_now(rig, p, [b"3", b"2"], [3, 2], stream) is None
    assert rig.log.next_offset == 2 and stream.seen_failures is None
    res = await rig.publish(p, [b"3", b"2"], seqs=[3, 2])
    assert list(res.offsets) == [2, 1] and res.duplicates == 1, "seq 3 was not remembered by the decline"

    # Another publish of the topic on its way to the log: no overtaking it.
    reliable = rig.topic.reliable
    assert reliable is not None
    admission = reliable._admission  # held here: the task waits for it
    await admission.acquire()
    waiting = asyncio.create_task(rig.publish(p, [b"4"], seqs=[4]))
    await asyncio.sleep(0.01)
    assert publish_now(rig, p, [b"5"], [5], stream) is None
    admission.release()
    assert publish_now(rig, p, [b"5"], [5], stream) is None, "free again, but the waiting task goes first"
    assert (await waiting).first_offset == 3
    done = publish_now(rig, p, [b"5"], [5], stream)
    assert done is not None and (await done.fut).first_offset == 4

    # A stream refused earlier: the task refuses the batch, with why.
    refused = PublishStream(refused=True)
    assert publish_now(rig, p, [b"6"], [6], refused) is None
    with pytest.raises(StorageFailed, match="keep the stream's order"):
        await rig.publish(p, [b"6"], seqs=[6], stream=refused)
    assert rig.log.next_offset == 5
    await rig.close()


async def test_publish_now_storage_failures_refuse_the_stream_as_publish_does(resources: Resources) -> None:
    rig = Rig(resources, FakeLogs(auto_commit=False))
    p = await rig.producer()
    stream = PublishStream()
    a = publish_now(rig, p, [b"a"], [1], stream)
    b = publish_now(rig, p, [b"b"], [2], stream)
    assert a is not None and b is not None
    rig.log.fail_pending(DiskFull("disk full"))
    for o in (a, b):
        with pytest.raises(DiskFull):
            await o.fut
    assert stream.refused and rig.reg.last_sequence(p) == 0
    assert publish_now(rig, p, [b"c"], [3], stream) is None, "later batches of the stream go to the task"

    # Refused when queued (the log refuses at once): answered from a callback, never inside the call.
    other = PublishStream()
    rig.log.fail_next(DiskFull("disk full"))
    c = publish_now(rig, p, [b"a"], [1], other)
    assert c is not None and c.calls == 0
    with pytest.raises(DiskFull):
        await c.fut
    assert other.refused and rig.log.next_offset == 0
    rig.log.auto_commit = True
    res = await rig.publish(p, [b"a"], seqs=[1], stream=PublishStream())
    assert res.duplicates == 0 and res.first_offset == 0, "the refused batches' re-sends are new"
    await rig.close()
