"""A topic's domain objects with no gRPC and no etcd: publish, subscriptions, consumers, producers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from danube_broker.dispatch.base import SubType
from danube_broker.topic import Topic
from danube_common.errors import (
    ConsumerBusy,
    DispatchStrategyMismatch,
    FailedPrecondition,
    ProducerBusy,
    SubscriptionTypeMismatch,
    TopicNotOwned,
    Unavailable,
)
from danube_common.records import TopicRecord
from danube_common.topic_name import TopicName
from tests.support import wait_until
from tests.unit.broker.helpers import BROKER_URL, config, index, msgs

pytestmark = pytest.mark.unit

T = TopicName("default", "t")


class Ids:
    def __init__(self) -> None:
        self.n = 100

    def __call__(self) -> int:
        self.n += 1
        return self.n


def make_topic(**cfg: Any) -> tuple[Topic, Ids]:
    topic = Topic(T, epoch=7, cfg=config(**cfg), broker_url=BROKER_URL)
    topic.accept_record(TopicRecord(str(T)))
    return topic, Ids()


def sub(topic: Topic, ids: Ids, name: str, consumer: str, kind: SubType = SubType.SHARED, **kw: Any):  # type: ignore[no-untyped-def]
    c = topic.subscribe(
        subscription=name,
        consumer_name=consumer,
        sub_type=kind,
        key_filters=kw.get("filters", ()),
        new_id=ids(),
        now=0.0,
    )
    c.open_stream()
    return c


def queued(c) -> list[int]:  # type: ignore[no-untyped-def]
    return [index(m) for m in c.queue.take(10_000)]


async def test_publish_assigns_offsets_in_order_and_stamps_msg_id() -> None:
    topic, ids = make_topic()
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)
    c = sub(topic, ids, "s", "c")
    assert await topic.publish(p, msgs(3), 3) == 0
    assert await topic.publish(p, msgs(2, start=3), 2) == 3
    got = c.queue.take(100)
    assert [m.msg_id.topic_offset for m in got] == [0, 1, 2, 3, 4]
    assert {(m.msg_id.producer_id, m.msg_id.topic_name, m.msg_id.broker_addr) for m in got} == {
        (p.id, "/default/t", BROKER_URL)
    }
    assert topic.stats().msgs_in == 5 and topic.stats().msgs_out == 5


async def test_every_subscription_gets_the_same_message_objects() -> None:
    topic, ids = make_topic()
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)
    a = sub(topic, ids, "s1", "a", SubType.EXCLUSIVE)
    b = sub(topic, ids, "s2", "b", SubType.FAILOVER)
    batch = msgs(4)
    await topic.publish(p, batch, 4)
    got_a, got_b = a.queue.take(10), b.queue.take(10)
    assert got_a is batch and got_b is batch


async def test_publish_fills_producer_name_and_publish_time_when_missing() -> None:
    topic, ids = make_topic()
    p, _ = topic.attach_producer("named", exclusive=False, new_id=ids(), now=0.0)
    c = sub(topic, ids, "s", "c")
    batch = msgs(2, producer="")
    for m in batch:
        m.publish_time = 0
    await topic.publish(p, batch, 2)
    got = c.queue.take(10)
    assert {m.producer_name for m in got} == {"named"}
    assert all(m.publish_time > 0 for m in got)


async def test_shared_subscription_spreads_round_robin_exactly() -> None:
    topic, ids = make_topic()
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)
    cs = [sub(topic, ids, "s", f"c{i}") for i in range(3)]
    await topic.publish(p, msgs(9), 9)
    assert [queued(c) for c in cs] == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]


async def test_failover_promotes_the_next_consumer_when_the_active_stream_ends() -> None:
    topic, ids = make_topic()
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)
    a = topic.subscribe(
        subscription="s", consumer_name="a", sub_type=SubType.FAILOVER, key_filters=(), new_id=ids(), now=0
    )
    b = topic.subscribe(
        subscription="s", consumer_name="b", sub_type=SubType.FAILOVER, key_filters=(), new_id=ids(), now=0
    )
    sb = b.open_stream()
    sa = a.open_stream()  # a attached first: it is active although its stream opened second
    await topic.publish(p, msgs(3), 3)
    assert queued(a) == [0, 1, 2] and queued(b) == []
    a.stream_closed(sa, now=1.0)
    await topic.publish(p, msgs(2, start=3), 2)
    assert queued(b) == [3, 4]
    a.open_stream()  # a is back: earliest-attached connected consumer again
    await topic.publish(p, msgs(1, start=5), 1)
    assert queued(a) == [5] and queued(b) == []
    b.stream_closed(sb, now=1.0)


async def test_exclusive_subscription_refuses_other_names_and_allows_takeover() -> None:
    topic, ids = make_topic()
    first = topic.subscribe(
        subscription="s", consumer_name="c1", sub_type=SubType.EXCLUSIVE, key_filters=(), new_id=ids(), now=0
    )
    with pytest.raises(ConsumerBusy, match="exclusive"):
        topic.subscribe(
            subscription="s",
            consumer_name="c2",
            sub_type=SubType.EXCLUSIVE,
            key_filters=(),
            new_id=ids(),
            now=0,
        )
    again = topic.subscribe(
        subscription="s", consumer_name="c1", sub_type=SubType.EXCLUSIVE, key_filters=(), new_id=ids(), now=0
    )
    assert again is first and again.id == first.id
    topic.remove_consumer(first, now=1.0)
    other = topic.subscribe(
        subscription="s", consumer_name="c2", sub_type=SubType.EXCLUSIVE, key_filters=(), new_id=ids(), now=1
    )
    assert other.id != first.id


async def test_subscription_type_is_fixed_by_the_first_consumer() -> None:
    topic, ids = make_topic()
    topic.subscribe(
        subscription="s", consumer_name="a", sub_type=SubType.SHARED, key_filters=(), new_id=ids(), now=0
    )
    with pytest.raises(SubscriptionTypeMismatch, match="Shared"):
        topic.subscribe(
            subscription="s",
            consumer_name="b",
            sub_type=SubType.FAILOVER,
            key_filters=(),
            new_id=ids(),
            now=0,
        )


async def test_key_shared_on_a_topic_respects_filters() -> None:
    topic, ids = make_topic()
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)
    red = sub(topic, ids, "s", "red", SubType.KEY_SHARED, filters=("red-*",))
    blue = sub(topic, ids, "s", "blue", SubType.KEY_SHARED, filters=("blue-*",))
    batch = msgs(1, start=0, key="red-1") + msgs(1, start=1, key="blue-1") + msgs(1, start=2, key="green")
    await topic.publish(p, batch, 3)
    assert queued(red) == [0] and queued(blue) == [1]
    assert topic.stats().msgs_dropped == 1


# ---------------------------------------------------------------- slow consumers
async def test_drop_policy_drops_what_does_not_fit_and_counts_it() -> None:
    topic, ids = make_topic(consumer_queue_messages=5)
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)
    c = sub(topic, ids, "s", "slow", SubType.EXCLUSIVE)
    await topic.publish(p, msgs(3), 3)
    await topic.publish(p, msgs(4, start=3), 4)
    assert queued(c) == [0, 1, 2, 3, 4]
    stats = topic.stats()
    assert stats.msgs_dropped == 2 and stats.per_subscription["s"].msgs_dropped == 2
    assert stats.msgs_out == 5


async def test_shared_drops_only_when_every_consumer_is_full() -> None:
    topic, ids = make_topic(consumer_queue_messages=2)
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)
    a, b = sub(topic, ids, "s", "a"), sub(topic, ids, "s", "b")
    await topic.publish(p, msgs(4), 4)  # a:[0, 2] b:[1, 3]: both full
    a.queue.take(10)  # a catches up; b stays full
    await topic.publish(p, msgs(3, start=4), 3)  # b is skipped: a takes 4 and 5; 6 finds no room
    assert queued(a) == [4, 5] and queued(b) == [1, 3]
    assert topic.stats().msgs_dropped == 1


async def test_consumer_between_subscribe_and_stream_gets_messages_but_not_after_its_stream_ends() -> None:
    topic, ids = make_topic()
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)

    def attach():  # type: ignore[no-untyped-def]
        return topic.subscribe(
            subscription="s",
            consumer_name="c",
            sub_type=SubType.EXCLUSIVE,
            key_filters=(),
            new_id=ids(),
            now=0,
        )

    c = attach()
    await topic.publish(p, msgs(2), 2)  # subscribed, stream not open yet: queued for it
    session = c.open_stream()
    assert queued(c) == [0, 1]
    c.stream_closed(session, now=1.0)  # disconnected: not routed to
    await topic.publish(p, msgs(3, start=2), 3)
    assert len(c.queue) == 0 and topic.stats().msgs_dropped == 3
    assert attach() is c  # subscribing again (takeover) makes it routable until its next stream
    await topic.publish(p, msgs(1, start=5), 1)
    assert queued(c) == [5]


async def test_block_policy_waits_for_room_then_delivers_in_order() -> None:
    topic, ids = make_topic(
        consumer_queue_messages=2, slow_consumer_policy="block", slow_consumer_block_timeout_ms=10_000
    )
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)
    c = sub(topic, ids, "s", "c", SubType.EXCLUSIVE)
    first = asyncio.create_task(topic.publish(p, msgs(3), 3))
    second = asyncio.create_task(topic.publish(p, msgs(1, start=3), 1))
    await wait_until(lambda: len(c.queue) == 2, what="the first two messages queued")
    assert not first.done() and not second.done()
    got = queued(c)  # makes room: the blocked batch goes on, then the second one
    await wait_until(lambda: second.done(), what="both publishes done")
    got += queued(c)
    assert await first == 0 and await second == 3
    assert got == [0, 1, 2, 3]
    assert topic.stats().msgs_dropped == 0


async def test_block_policy_drops_after_the_timeout() -> None:
    topic, ids = make_topic(
        consumer_queue_messages=2, slow_consumer_policy="block", slow_consumer_block_timeout_ms=50
    )
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)
    c = sub(topic, ids, "s", "c", SubType.EXCLUSIVE)
    assert await asyncio.wait_for(topic.publish(p, msgs(5), 5), 5) == 0
    assert queued(c) == [0, 1]
    assert topic.stats().msgs_dropped == 3


# ---------------------------------------------------------------- producers
def test_exclusive_producer_refuses_others_and_is_refused_when_others_exist() -> None:
    topic, ids = make_topic()
    ex, _ = topic.attach_producer("ex", exclusive=True, new_id=ids(), now=0.0)
    with pytest.raises(ProducerBusy, match="exclusive producer"):
        topic.attach_producer("shared", exclusive=False, new_id=ids(), now=0.0)
    with pytest.raises(ProducerBusy):
        topic.attach_producer("ex2", exclusive=True, new_id=ids(), now=0.0)
    same, created = topic.attach_producer("ex", exclusive=True, new_id=ids(), now=0.0)
    assert same is ex and not created
    topic.detach_producer(ex)
    s1, _ = topic.attach_producer("s1", exclusive=False, new_id=ids(), now=0.0)
    with pytest.raises(ProducerBusy, match="needs the topic to itself"):
        topic.attach_producer("ex", exclusive=True, new_id=ids(), now=0.0)
    assert s1.live and not ex.live


def test_dispatch_strategy_mismatch() -> None:
    topic = Topic(T, epoch=1, cfg=config(), broker_url=BROKER_URL)
    rec = TopicRecord(str(T), dispatch_strategy="reliable")
    topic.accept_record(rec, "reliable")
    assert topic.is_reliable
    with pytest.raises(DispatchStrategyMismatch, match="reliable"):
        topic.accept_record(rec, "non_reliable")


async def test_close_ends_streams_with_the_error_and_refuses_publish() -> None:
    topic, ids = make_topic()
    p, _ = topic.attach_producer("p", exclusive=False, new_id=ids(), now=0.0)
    c = topic.subscribe(
        subscription="s", consumer_name="c", sub_type=SubType.SHARED, key_filters=(), new_id=ids(), now=0
    )
    session = c.open_stream()
    err = TopicNotOwned("moved")
    producers, consumers = topic.close(err)
    assert producers == [p] and consumers == [c]
    assert p.detach_error is err and not p.live
    with pytest.raises(TopicNotOwned):
        await c.next_batch(session, 10)
    with pytest.raises(TopicNotOwned):
        await topic.publish(p, msgs(1), 1)


async def test_a_reliable_topic_serves_through_its_log_only() -> None:
    topic = Topic(T, epoch=1, cfg=config(), broker_url=BROKER_URL)
    rec = TopicRecord(str(T), dispatch_strategy="reliable")
    topic.accept_record(rec)
    p, _ = topic.attach_producer("p", exclusive=False, new_id=1, now=0.0)
    assert topic.reliable is None and "still opening" in topic.stats().state
    with pytest.raises(Unavailable, match="still opening"):
        await topic.publish_batch(p, msgs(1), 1)
    with pytest.raises(Unavailable, match="no storage configured"):
        await topic.adopt(rec)
    with pytest.raises(FailedPrecondition, match="is reliable"):
        topic.subscribe(
            subscription="s", consumer_name="c", sub_type=SubType.SHARED, key_filters=(), new_id=2, now=0
        )
