"""Publish/consume through the lookup service on each subscription type, checking semantics.

Topics are non-reliable: a message reaches the consumers attached when it is published, so
each test attaches its consumers before producing (the SDK's subscribe returns once the
broker has the consumer).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import pytest

from danube_common.errors import ConsumerBusy
from danube_sdk import DanubeClient, Message, SubType
from tests.support import unique

pytestmark = [pytest.mark.e2e]


async def drain(consumer, n: int, timeout_s: float = 15.0) -> list[Message]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(n):
        msg = await consumer.receive(timeout_s=timeout_s)
        await consumer.ack(msg)
        out.append(msg)
    return out


async def test_exclusive_delivers_in_order_and_refuses_second_consumer(client: DanubeClient) -> None:
    topic = f"/default/{unique('excl')}"
    producer = await client.create_producer(topic)
    c1 = await client.subscribe(topic, subscription="s", consumer_name="c1", sub_type=SubType.EXCLUSIVE)
    with pytest.raises(ConsumerBusy) as err:
        await client.subscribe(topic, subscription="s", consumer_name="c2", sub_type=SubType.EXCLUSIVE)
    assert "exclusive" in str(err.value).lower()

    ids = await producer.send_many([f"m{i}".encode() for i in range(50)])
    got = await drain(c1, 50)
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(50)]
    assert [m.message_id.offset for m in got] == [i.offset for i in ids]
    assert [m.message_id.offset for m in got] == sorted(m.message_id.offset for m in got)


async def test_shared_spreads_round_robin(client: DanubeClient) -> None:
    topic = f"/default/{unique('shared')}"
    producer = await client.create_producer(topic)
    consumers = [
        await client.subscribe(topic, subscription="s", consumer_name=f"c{i}", sub_type=SubType.SHARED)
        for i in range(3)
    ]
    await producer.send_many([f"m{i}".encode() for i in range(30)])
    per_consumer = await asyncio.gather(*(drain(c, 10) for c in consumers))
    payloads = [m.payload for batch in per_consumer for m in batch]
    assert sorted(payloads) == sorted(f"m{i}".encode() for i in range(30)), "every message exactly once"
    assert [len(b) for b in per_consumer] == [10, 10, 10]
    # Round-robin: each consumer's offsets are spaced by the number of consumers.
    for batch in per_consumer:
        offsets = [m.message_id.offset for m in batch]
        assert all(b - a == 3 for a, b in itertools.pairwise(offsets)), offsets


async def test_failover_delivers_to_one_and_moves_on_disconnect(client: DanubeClient) -> None:
    topic = f"/default/{unique('failover')}"
    producer = await client.create_producer(topic)
    active = await client.subscribe(topic, subscription="s", consumer_name="a", sub_type=SubType.FAILOVER)
    standby = await client.subscribe(topic, subscription="s", consumer_name="b", sub_type=SubType.FAILOVER)

    await producer.send_many([f"first-{i}".encode() for i in range(20)])
    got_active = await drain(active, 20)
    assert [m.payload for m in got_active] == [f"first-{i}".encode() for i in range(20)]

    await active.close()
    # The standby is promoted: it receives the next messages, and nothing of the first batch.
    second = [f"second-{i}".encode() for i in range(20)]
    sent_ok = False
    for _ in range(3):  # a batch published before the broker saw the close may go to `active`
        await producer.send_many(second)
        first_msg = await standby.receive(timeout_s=5)
        if first_msg.payload == second[0]:
            sent_ok = True
            break
    assert sent_ok, "standby never became active"
    rest = await drain(standby, 19)
    assert [first_msg.payload] + [m.payload for m in rest] == second


async def test_key_shared_keeps_each_key_on_one_consumer(client: DanubeClient) -> None:
    topic = f"/default/{unique('keyshared')}"
    producer = await client.create_producer(topic)
    consumers = [
        await client.subscribe(topic, subscription="s", consumer_name=f"c{i}", sub_type=SubType.KEY_SHARED)
        for i in range(3)
    ]
    keys = [f"key-{k}" for k in range(12)]
    for round_ in range(5):
        for k in keys:
            await producer.send_async(f"{k}:{round_}".encode(), key=k)
    await producer.flush()

    total = len(keys) * 5
    received: dict[str, list[Message]] = {}

    async def collect(idx: int) -> None:
        c = consumers[idx]
        while sum(len(v) for v in received.values()) < total:
            try:
                msg = await c.receive(timeout_s=0.5)
            except TimeoutError:
                continue
            await c.ack(msg)
            received.setdefault(f"c{idx}", []).append(msg)

    await asyncio.wait_for(asyncio.gather(*(collect(i) for i in range(3))), 30)
    owner_of: dict[str, set[str]] = {}
    for cname, msgs in received.items():
        for m in msgs:
            owner_of.setdefault(m.key or "", set()).add(cname)
    assert set(owner_of) == set(keys)
    assert all(len(owners) == 1 for owners in owner_of.values()), owner_of
    assert len({next(iter(o)) for o in owner_of.values()}) >= 2, "keys should spread over consumers"
    # Per key, order is kept.
    for cname, msgs in received.items():
        by_key = Counter()
        for m in msgs:
            k, r = m.payload.decode().split(":")
            assert int(r) == by_key[k], f"{cname} got {k} out of order"
            by_key[k] += 1
