"""One delivery stream per consumer: waiting, replacement, normal end, disconnection."""

from __future__ import annotations

import asyncio

import pytest

from danube_broker.dispatch.base import SubType
from danube_broker.topic import Topic
from danube_common.errors import ConsumerBusy
from danube_common.records import TopicRecord
from danube_common.topic_name import TopicName
from tests.support import wait_until
from tests.unit.broker.helpers import BROKER_URL, config, index, msgs

pytestmark = pytest.mark.unit


def consumer(sub_type: SubType = SubType.SHARED, name: str = "c"):  # type: ignore[no-untyped-def]
    topic = Topic(TopicName("default", "t"), epoch=1, cfg=config(), broker_url=BROKER_URL)
    topic.accept_record(TopicRecord("/default/t"))
    return topic.subscribe(
        subscription="s", consumer_name=name, sub_type=sub_type, key_filters=(), new_id=1, now=0
    )


async def test_next_batch_waits_for_messages_and_frames_what_is_queued() -> None:
    c = consumer()
    session = c.open_stream()
    waiter = asyncio.create_task(c.next_batch(session, 3))
    await asyncio.sleep(0)
    assert not waiter.done()
    c.deliver(msgs(2))
    c.deliver(msgs(3, start=2))
    first = await asyncio.wait_for(waiter, 5)
    assert [index(m) for m in first] == [0, 1, 2]
    assert [index(m) for m in await c.next_batch(session, 10)] == [3, 4]  # type: ignore[union-attr]


async def test_a_new_stream_replaces_the_old_one() -> None:
    c = consumer()
    old = c.open_stream()
    waiter = asyncio.create_task(c.next_batch(old, 10))
    new = c.open_stream()
    with pytest.raises(ConsumerBusy, match="newer stream"):
        await asyncio.wait_for(waiter, 5)
    c.stream_closed(old, now=1.0)
    assert c.connected, "closing the replaced stream does not disconnect the consumer"
    c.deliver(msgs(1))
    assert [index(m) for m in await c.next_batch(new, 10)] == [0]  # type: ignore[union-attr]


async def test_close_ends_the_stream_normally_and_discards_the_queue() -> None:
    c = consumer()
    session = c.open_stream()
    c.deliver(msgs(4))
    assert c.close() == 4
    assert await c.next_batch(session, 10) is None


async def test_stream_end_disconnects_and_failover_promotes_at_once() -> None:
    a = consumer(SubType.FAILOVER, "a")
    sub = a.subscription
    b = sub.attach(consumer_name="b", sub_type=SubType.FAILOVER, key_filters=(), new_id=2, now=0)
    sa, sb = a.open_stream(), b.open_stream()
    assert sub.active_consumer is a
    a.stream_closed(sa, now=5.0)
    assert not a.connected and a.last_seen == 5.0
    assert sub.active_consumer is b
    waiter = asyncio.create_task(b.next_batch(sb, 10))
    assert sub.offer(msgs(2), 2) == []
    got = await asyncio.wait_for(waiter, 5)
    assert [index(m) for m in got] == [0, 1]  # type: ignore[union-attr]
    await wait_until(lambda: len(b.queue) == 0)
