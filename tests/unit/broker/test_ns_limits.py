"""Namespace policies on the broker (in-memory store, fake logs): the rate algorithm as a
table, admission limits, a change reaching running topics through the watch, publish order
kept while batches wait, and the backlog quota's three policies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from danube_broker.dispatch.base import SubType
from danube_broker.ns_limits import DispatchRate, NamespaceLimits, dispatch_allowance, gcra
from danube_broker.reader import ReaderStart
from danube_broker.registry import BrokerRegistry
from danube_common.errors import (
    MessageTooLarge,
    QuotaExceeded,
    TooManyConsumers,
    TooManyProducers,
    TooManySubscriptions,
)
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.namespace_view import NamespaceView
from danube_common.resources import Resources
from tests.support import wait_until
from tests.unit.broker.fake_log import FakeLogs
from tests.unit.broker.helpers import BROKER_URL, Clock, config, msgs

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]

TOPIC = "/team/orders"


@pytest.mark.parametrize(
    ("tat", "now", "cost", "burst", "new_tat", "delay"),
    [
        (0.0, 10.0, 0.05, 0.1, 10.05, 0.0),  # idle, a batch within the burst: at once
        (0.0, 10.0, 0.5, 0.1, 10.5, 0.4),  # idle, a batch larger than the burst waits for itself
        (10.5, 10.0, 0.5, 0.1, 11.0, 0.9),  # behind the earlier batches too
        (10.02, 10.0, 0.05, 0.1, 10.07, 0.0),  # within the tolerance
        (12.0, 10.0, 0.0, 0.1, 12.0, 1.9),  # an empty batch still queues behind the others
    ],
)
def test_gcra(tat: float, now: float, cost: float, burst: float, new_tat: float, delay: float) -> None:
    got_tat, got_delay = gcra(tat, now, cost, burst)
    assert got_tat == pytest.approx(new_tat)
    assert got_delay == pytest.approx(delay)


@pytest.fixture
async def resources(memory_store: MemoryStore) -> Resources:
    res = Resources(memory_store, Keys("unit"))
    await res.create_namespace("team")
    return res


@pytest.fixture
async def reg(resources: Resources) -> AsyncIterator[BrokerRegistry]:
    r = BrokerRegistry(
        config(), resources, broker_url=BROKER_URL, clock=Clock(), id_seed=100, open_log=FakeLogs()
    )
    view = NamespaceView(resources.store, resources.keys)
    r.ns_limits = NamespaceLimits(view, r.topics, config())
    view.on_change = r.ns_limits.namespaces_changed
    await view.start()
    r.test_view = view  # type: ignore[attr-defined]
    yield r
    await view.aclose()
    r.close_all("test over")
    await r.wait_closed()


async def set_policies(reg: BrokerRegistry, resources: Resources, **changes: Any) -> None:
    """Write the policies and wait until the broker's view applied them."""
    clear = [k for k, v in changes.items() if v is None]
    await resources.update_namespace_policies(
        "team", {k: v for k, v in changes.items() if v is not None}, clear
    )
    rev = (await resources.store.get(resources.keys.namespace("team"))).mod_revision  # type: ignore[union-attr]
    assert await reg.test_view.wait_revision(rev)  # type: ignore[attr-defined]


async def producer(reg: BrokerRegistry, name: str, dispatch: str = "non_reliable") -> Any:
    return await reg.create_producer(TOPIC, name, exclusive=False, dispatch_strategy=dispatch)


async def test_no_policy_no_limits_object(reg: BrokerRegistry) -> None:
    await producer(reg, "p")
    assert reg.topics[TOPIC].limits is None


async def test_producers_over_the_limit_are_refused_and_a_raise_lets_them_in(
    reg: BrokerRegistry, resources: Resources
) -> None:
    await set_policies(reg, resources, max_producers_per_topic=2)
    await producer(reg, "a")
    await producer(reg, "b")
    await producer(reg, "a")  # a reconnect of an attached producer is not a new one
    with pytest.raises(TooManyProducers, match="max_producers_per_topic=2"):
        await producer(reg, "c")
    await set_policies(reg, resources, max_producers_per_topic=3)
    await producer(reg, "c")
    await set_policies(reg, resources, max_producers_per_topic=None)
    assert reg.topics[TOPIC].limits is None
    await producer(reg, "d")


async def test_consumers_and_subscriptions_over_their_limits_are_refused(
    reg: BrokerRegistry, resources: Resources
) -> None:
    await set_policies(reg, resources, max_subscriptions_per_topic=2, max_consumers_per_topic=3)
    await producer(reg, "p")

    async def sub(s: str, c: str) -> Any:
        return await reg.subscribe(TOPIC, subscription=s, consumer_name=c, sub_type=SubType.SHARED)

    await sub("s1", "c1")
    await sub("s2", "c1")
    with pytest.raises(TooManySubscriptions, match="max_subscriptions_per_topic=2"):
        await sub("s3", "c1")
    await sub("s1", "c2")
    with pytest.raises(TooManyConsumers, match="max_consumers_per_topic=3"):
        await sub("s2", "c2")
    await sub("s1", "c1")  # a reconnect is not a new consumer


async def test_a_smaller_message_size_reaches_a_running_topic(
    reg: BrokerRegistry, resources: Resources
) -> None:
    p = await producer(reg, "p")
    batch = msgs(2, size=100)
    await reg.publish(p, batch, reg.payload_bytes(batch))
    await set_policies(reg, resources, max_message_size_bytes=50)
    batch = msgs(2, size=100)
    with pytest.raises(MessageTooLarge, match="namespace team accepts at most 50 bytes"):
        await reg.publish(p, batch, reg.payload_bytes(batch))
    assert reg.topics[TOPIC].counters.msgs_in == 2


async def test_batches_waiting_for_the_rate_keep_their_order(
    reg: BrokerRegistry, resources: Resources
) -> None:
    await set_policies(reg, resources, publish_rate_msgs_per_s=2000.0)
    p = await producer(reg, "p")
    batches = [msgs(10, start=10 * i) for i in range(30)]  # 300 messages: ~0.15 s at the rate
    tasks = [asyncio.create_task(reg.publish(p, b, reg.payload_bytes(b))) for b in batches]
    results = await asyncio.gather(*tasks)
    firsts = [r.first_offset for r in results]
    assert firsts == sorted(firsts) and firsts == [10 * i for i in range(30)]
    limits = reg.topics[TOPIC].limits
    assert limits is not None and limits.rate_waits > 0


async def test_the_publish_rate_counts_the_messages_of_a_pack(
    reg: BrokerRegistry, resources: Resources
) -> None:
    await set_policies(reg, resources, publish_rate_msgs_per_s=100.0)  # a burst of 10 messages
    p = await producer(reg, "p")
    limits = reg.topics[TOPIC].limits
    assert limits is not None
    plain = msgs(1)
    await reg.publish(p, plain, reg.payload_bytes(plain))
    assert limits.rate_waits == 0
    packed = msgs(1)
    packed[0].batch_size = 30  # one record carrying 30 messages: more than the burst
    await reg.publish(p, packed, reg.payload_bytes(packed))
    assert limits.rate_waits == 1


async def reliable_backlog(reg: BrokerRegistry, resources: Resources, policy: str) -> tuple[Any, Any]:
    await set_policies(reg, resources, backlog_quota_messages=10, backlog_quota_policy=policy)
    p = await producer(reg, "p", "reliable")
    c = await reg.subscribe(TOPIC, subscription="slow", consumer_name="c", sub_type=SubType.EXCLUSIVE)
    batch = msgs(8)
    await reg.publish(p, batch, reg.payload_bytes(batch))
    return p, c


async def test_backlog_quota_refuse(reg: BrokerRegistry, resources: Resources) -> None:
    p, _ = await reliable_backlog(reg, resources, "refuse")
    batch = msgs(5)
    with pytest.raises(QuotaExceeded, match="backlog_quota_messages, policy refuse"):
        await reg.publish(p, batch, reg.payload_bytes(batch))
    batch = msgs(2)
    await reg.publish(p, batch, reg.payload_bytes(batch))  # up to the quota is fine


async def test_backlog_quota_evict_skips_the_oldest(reg: BrokerRegistry, resources: Resources) -> None:
    p, _ = await reliable_backlog(reg, resources, "evict")
    batch = msgs(5)
    await reg.publish(p, batch, reg.payload_bytes(batch))
    topic = reg.topics[TOPIC]
    assert topic.subscriptions["slow"].backlog() == 10
    assert topic.limits is not None and topic.limits.evicted == 3


async def test_backlog_quota_hold_waits_for_acks(reg: BrokerRegistry, resources: Resources) -> None:
    p, _ = await reliable_backlog(reg, resources, "hold")
    batch = msgs(5)
    held = asyncio.create_task(reg.publish(p, batch, reg.payload_bytes(batch)))
    topic = reg.topics[TOPIC]
    await wait_until(lambda: topic.limits is not None and topic.limits.backlog_waits == 1, what="held")
    assert not held.done()
    reg.ack(TOPIC, "slow", [0, 1, 2, 3])
    result = await asyncio.wait_for(held, 5)
    assert result.first_offset == 8


@pytest.mark.parametrize(
    ("tat", "now", "rate", "burst", "allowed"),
    [
        (0.0, 10.0, 50.0, 0.1, 5),  # caught up: the burst's worth
        (0.0, 10.0, 1.0, 0.1, 1),  # caught up: at least one, however slow the rate
        (10.05, 10.0, 50.0, 0.1, 2),  # part of the tolerance used
        (10.2, 10.0, 50.0, 0.1, 0),  # ahead of the rate: hold back
    ],
)
def test_dispatch_allowance(tat: float, now: float, rate: float, burst: float, allowed: int) -> None:
    assert dispatch_allowance(tat, now, rate, burst) == allowed


def test_dispatch_rate_charges_what_was_delivered() -> None:
    class Engine:
        delivered_total = 0

    clock = Clock(100.0)
    engine = Engine()
    gate = DispatchRate(10.0, engine, clock=clock)  # type: ignore[arg-type]
    assert gate() == 1
    engine.delivered_total = 5  # a step sent 5: half a second's worth
    assert gate() == 0
    clock.advance(0.45)
    assert gate() == 0  # 0.05 s of tolerance left: not a whole message at 10/s
    clock.advance(0.05)
    assert gate() == 1  # caught up
    engine.delivered_total = 6
    clock.advance(10)
    assert gate() == 1  # an idle gate allows the burst's worth (here one)


async def test_dispatch_rate_bounds_each_delivery_step(reg: BrokerRegistry, resources: Resources) -> None:
    p = await producer(reg, "p", "reliable")
    consumer = await reg.subscribe(TOPIC, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE)
    await set_policies(reg, resources, dispatch_rate_msgs_per_s=20.0)
    engine = reg.topics[TOPIC].subscriptions["s"].engine
    assert engine is not None and isinstance(engine.delivery_gate, DispatchRate)
    batch = msgs(10)
    await reg.publish(p, batch, reg.payload_bytes(batch))
    # 20 msg/s with 0.1 s of tolerance: 2 at once, the rest over the next ~0.4 s.
    await wait_until(lambda: engine.delivered_total >= 2, what="first deliveries")
    assert engine.delivered_total < 10
    await wait_until(lambda: engine.delivered_total == 10, timeout_s=5, what="the rest, at the rate")
    assert len(consumer.queue) == 10
    await set_policies(reg, resources, dispatch_rate_msgs_per_s=None)
    assert engine.delivery_gate is None


async def test_message_ttl_expires_old_unacknowledged_messages(
    reg: BrokerRegistry, resources: Resources
) -> None:
    p = await producer(reg, "p", "reliable")
    await reg.subscribe(TOPIC, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE)
    await set_policies(reg, resources, message_ttl_s=60)
    batch = msgs(4)  # publish_time 1 ms after the epoch: long expired
    await reg.publish(p, batch, reg.payload_bytes(batch))
    topic = reg.topics[TOPIC]
    assert topic.limits is not None
    assert await topic.limits.expire(topic, now_ms=2_000) == 0  # not 60 s old yet then
    assert await topic.limits.expire(topic, now_ms=10**13) == 4
    assert topic.subscriptions["s"].backlog() == 0 and topic.limits.expired == 4


async def test_a_reader_holds_no_backlog_for_the_quota_nor_the_ttl(
    reg: BrokerRegistry, resources: Resources
) -> None:
    """A reader (non-durable subscription) lagging behind neither refuses producers under a
    backlog quota nor has messages expired or evicted on its behalf."""
    await set_policies(
        reg, resources, backlog_quota_messages=10, backlog_quota_policy="refuse", message_ttl_s=60
    )
    p = await producer(reg, "p", "reliable")
    await reg.subscribe(
        TOPIC,
        subscription="r",
        consumer_name="r",
        sub_type=SubType.EXCLUSIVE,
        reader=ReaderStart("earliest"),
    )
    for _ in range(3):
        batch = msgs(8)
        await reg.publish(p, batch, reg.payload_bytes(batch))  # 24 > 10: no durable subscription lags
    topic = reg.topics[TOPIC]
    reader = topic.subscriptions["r"]
    assert reader.non_durable and reader.backlog() == 24
    assert topic.limits is not None
    assert await topic.limits.expire(topic, now_ms=10**13) == 0
    assert reader.backlog() == 24 and topic.limits.evicted == 0
