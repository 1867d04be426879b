"""The topic's latest message objects, shared by its dispatchers instead of parsing records, and
delivery at publish time by a parked dispatcher."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest

from danube_broker.dispatch.base import Msg
from danube_broker.dispatch.reliable.engine import HELD_RETRY_S, SubscriptionEngine
from danube_broker.dispatch.reliable.policy import SubscriptionPolicy
from danube_broker.dispatch.reliable.recent import RecentMessages
from danube_broker.reliable_topic import ReliableTopic
from danube_common.pb import DanubeApi_pb2 as pb
from tests.support import wait_until
from tests.unit.broker.fake_log import FakeLog
from tests.unit.broker.reliable_helpers import make_rig, offsets, publish, take

pytestmark = pytest.mark.unit


def msgs(first: int, n: int) -> list[Msg]:
    out = []
    for i in range(first, first + n):
        m = pb.StreamMessage(payload=f"m{i}".encode(), producer_name="p")
        m.msg_id.topic_offset = i
        out.append(m)
    return out


def test_kept_by_offset_until_trimmed() -> None:
    r = RecentMessages()
    batch = msgs(0, 5)
    r.add(0, batch, [10] * 5)
    assert r.get(3) is batch[3] and r.get(5) is None and r.bytes == 50
    r.trim(3)
    assert [r.get(i) is not None for i in range(5)] == [False, False, False, True, True]
    assert len(r) == 2 and r.bytes == 20
    r.trim(100)
    assert len(r) == 0 and r.bytes == 0
    r.add(100, msgs(100, 1), [7])
    assert r.get(100) is not None


def test_batches_finishing_out_of_order_are_trimmed_too() -> None:
    r = RecentMessages()
    r.add(5, msgs(5, 3), [1] * 3)
    r.add(0, msgs(0, 5), [1] * 5)
    r.trim(6)
    assert sorted(o for o in range(8) if r.get(o) is not None) == [6, 7]


@pytest.mark.parametrize(("max_entries", "max_bytes", "kept"), [(3, 10_000, 3), (100, 25, 2), (0, 10_000, 0)])
def test_bounded_the_oldest_go_first(max_entries: int, max_bytes: int, kept: int) -> None:
    r = RecentMessages(max_entries=max_entries, max_bytes=max_bytes)
    r.add(0, msgs(0, 10), [10] * 10)
    assert len(r) == kept and r.bytes == 10 * kept
    assert all(r.get(o) is not None for o in range(10 - kept, 10))


async def test_the_dispatcher_delivers_the_kept_objects_and_parses_the_rest() -> None:
    recent = RecentMessages()
    log = FakeLog()
    rig = make_rig(log=log, recent=recent)
    c = rig.attach("c", window=100)
    await publish(log, 4)
    shared = msgs(2, 2)  # what the topic kept of offsets 2 and 3
    recent.add(2, shared, [1, 1])
    await rig.pump()
    got = take(c)
    assert offsets(got) == [0, 1, 2, 3]
    assert got[2] is shared[0] and got[3] is shared[1]
    assert got[0].payload == b"m0", "parsed from the log"


async def test_a_redelivery_copies_the_shared_object() -> None:
    recent = RecentMessages()
    log = FakeLog()
    first, second = make_rig(log=log, recent=recent), make_rig(log=log, recent=recent)
    c1, c2 = first.attach("c1", window=100), second.attach("c2", window=100)
    await publish(log, 1)
    recent.add(0, msgs(0, 1), [1])
    await first.pump()
    assert offsets(take(c1)) == [0]
    first.engine.nack(0, delay_ms=0)
    await first.pump()
    (again,) = take(c1)
    assert again.redelivery_count == 1
    await second.pump()
    (other,) = take(c2)
    assert other.redelivery_count == 0, "the other subscription's delivery is not marked redelivered"
    assert recent.get(0) is other and recent.get(0) is not again


# ---------------------------------------------------------------- delivering at publish time
async def parked(rig_engine: SubscriptionEngine) -> None:
    rig_engine.start()
    await wait_until(lambda: rig_engine._parked, what="the dispatcher parked")


async def test_a_parked_dispatcher_delivers_a_publish_at_once_without_its_task() -> None:
    log = FakeLog()
    rig = make_rig(log=log, policy=SubscriptionPolicy(ack_timeout_ms=0))
    c = rig.attach("c", window=100)
    await parked(rig.engine)
    try:
        await publish(log, 3)
        rig.engine.dispatch_now()
        assert offsets(take(c)) == [0, 1, 2], "delivered within the call"
        assert not rig.engine._wake.is_set(), "nothing left for the task: it stays asleep"
    finally:
        await rig.engine.aclose()


async def test_a_delivery_arms_the_ack_timeout_the_parked_task_did_not_have() -> None:
    log = FakeLog()
    rig = make_rig(log=log, policy=SubscriptionPolicy(ack_timeout_ms=30_000))
    c = rig.attach("c", window=100)
    await parked(rig.engine)
    try:
        assert rig.engine._parked_until == math.inf
        await publish(log, 1)
        rig.engine.dispatch_now()
        assert offsets(take(c)) == [0]
        expected = rig.clock() + 30.0
        await wait_until(
            lambda: rig.engine._parked and rig.engine._parked_until == expected,
            what="the task waiting for the ack timeout",
        )
    finally:
        await rig.engine.aclose()


async def test_what_is_not_in_the_tail_cache_is_left_to_the_task() -> None:
    log = FakeLog(cache_entries=2)
    rig = make_rig(log=log, policy=SubscriptionPolicy(ack_timeout_ms=0))
    c = rig.attach("c", window=100)
    await parked(rig.engine)
    try:
        await publish(log, 6)  # offsets 0..3 are on "disk" only
        rig.engine.dispatch_now()
        assert take(c) == [] and rig.engine._wake.is_set()
        got: list[Msg] = []
        await wait_until(lambda: bool(got.extend(take(c))) or len(got) == 6, what="the replay")
        assert offsets(got) == list(range(6))
    finally:
        await rig.engine.aclose()


async def test_a_subscription_far_behind_makes_the_topic_keep_nothing() -> None:
    """Through the topic: a subscription with no consumer does not make it hold what it publishes."""
    recent = RecentMessages(max_entries=4)
    behind = make_rig(recent=recent).engine
    behind.read_pos = 0
    topic = SimpleNamespace(count_in=lambda n, b: None, subscriptions={"s": SimpleNamespace(engine=behind)})
    host = SimpleNamespace(
        topic=topic, recent=recent, _uncompacted_bytes=0, _compact_at=float("inf"), _compaction_queued=False
    )
    publish_at = ReliableTopic._published
    publish_at(host, 0, msgs(0, 2), [1, 1], 2)  # type: ignore[arg-type]
    assert len(recent) == 2, "near the tail: kept"
    publish_at(host, 10, msgs(10, 2), [1, 1], 2)  # type: ignore[arg-type]
    assert len(recent) == 0, "10 behind with room for 4: nothing kept"


async def test_nothing_is_delivered_while_ownership_is_uncertain() -> None:
    """A broker waking from a pause past its lease must not deliver what it committed meanwhile
    (a new owner may reuse those offsets); once the lease is surely alive again, it delivers
    without waiting for another publish or ack."""
    sure = [True]
    log = FakeLog()
    rig = make_rig(log=log, policy=SubscriptionPolicy(ack_timeout_ms=0))
    rig.engine._may_deliver = lambda: sure[0]
    c = rig.attach("c", window=100)
    await parked(rig.engine)
    try:
        sure[0] = False
        await publish(log, 2)
        rig.engine.dispatch_now()
        await asyncio.sleep(HELD_RETRY_S * 3)  # the task's retries run meanwhile: still held
        assert take(c) == []
        sure[0] = True
        got: list[Msg] = []
        await wait_until(lambda: bool(got.extend(take(c))) or len(got) == 2, what="delivery once sure")
        assert offsets(got) == [0, 1]
    finally:
        await rig.engine.aclose()
