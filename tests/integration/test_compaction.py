"""Topic compaction with object storage: real etcd, S3 on moto_server, brokers in-process with
the in-process WAL uploader of tests/support/segments.py (the fixtures of
test_reliable_object_storage). The owner compacts (asked over gRPC, or by the threshold policy),
retention then deletes compacted history from S3, a compacted subscription still reads every
key's newest value, and after a move the new owner reads the view from S3."""

from __future__ import annotations

import logging

import grpc.aio
import pytest

from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.policies import topic_policies
from danube_common.storage import incarnation_prefix
from danube_common.topic_name import TopicName
from tests.integration.test_broker_grpc import Broker, connected
from tests.integration.test_reliable_dispatch import producer, receive
from tests.integration.test_reliable_object_storage import (  # noqa: F401 (fixtures)
    Rig,
    _cursor_is,
    _owner_is,
    ack_all,
    moto,
    reliable,
    rig,
)
from tests.support import unique, wait_until

pytestmark = pytest.mark.integration

KEYS = 20


def keyed_batch(pid: int, seq: int, first: int, n: int) -> pb.PublishBatch:
    msgs = []
    for i in range(first, first + n):
        m = pb.StreamMessage(payload=f"value-{i:06d}-".encode() * 8)
        m.routing_key = f"key-{i % KEYS:02d}"
        msgs.append(m)
    return pb.PublishBatch(producer_id=pid, batch_seq=seq, messages=msgs)


async def subscribe(b: Broker, topic: str, sub: str, *, compacted: bool) -> tuple[int, object]:
    resp = await b.consumers.Subscribe(
        pb.ConsumerRequest(
            topic_name=topic,
            consumer_name="c",
            subscription=sub,
            initial_position=pb.ConsumerRequest.Earliest,
            max_unacked_messages=5000,
            read_compacted=compacted,
        ),
        timeout=10,
    )
    cid = int(resp.consumer_id)
    stream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
    await connected(b, cid)
    return cid, stream


def newest_per_key(n: int) -> list[int]:
    return sorted(max(i for i in range(n) if i % KEYS == k) for k in range(KEYS))


async def test_compacted_history_survives_retention_and_a_move(
    rig: Rig,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="danube_broker.compaction")
    a = await rig.start_node()
    b = await rig.start_node()
    topic = f"/default/{unique('table')}"
    t = TopicName.parse(topic)
    await rig.resources.create_topic(
        t, dispatch_strategy="reliable", policies=topic_policies("reliable", retention_size_bytes=20_000)
    )
    n = 1000
    pid = (await producer(a.broker, topic)).producer_id
    cid, stream = await subscribe(a.broker, topic, "s", compacted=False)
    pub = a.broker.producers.PublishBatches()
    for seq in range(n // 50):
        await pub.write(keyed_batch(pid, seq, seq * 50, 50))
        assert not (await pub.read()).HasField("error")
    await pub.done_writing()
    got = await receive(stream, n)
    stream.cancel()  # type: ignore[attr-defined]

    stats = apb_grpc.BrokerStatsServiceStub(a.broker.channel)
    info = await stats.CompactTopic(apb.CompactTopicRequest(name=topic), timeout=30)
    assert (info.horizon, info.keys, info.entries, info.messages_read) == (n, KEYS, KEYS, n)
    assert info.stored_in == "object storage"
    shown = await stats.GetTopicStats(apb.TopicStatsRequest(name=topic), timeout=10)
    assert shown.has_compaction and shown.compaction.horizon == n

    rt = reliable(a.broker, topic)
    await ack_all(a.broker, cid, got)
    await wait_until(
        lambda: _cursor_is(rig, rig.keys.subscription_cursor(t, "s"), n - 1), what="cursor persisted"
    )
    assert await a.uploader.upload(t, rt.local.durable_offset) == n
    await rt.apply_retention()
    await wait_until(lambda: rt.log.first_offset > n // 2, timeout_s=20, what="retention deleting from S3")
    first = rt.log.first_offset

    _, view = await subscribe(a.broker, topic, "view", compacted=True)
    compacted = await receive(view, KEYS)
    assert [m.msg_id.topic_offset for m in compacted] == newest_per_key(n), "every key, below the cut too"
    assert [m.routing_key for m in compacted] == [f"key-{i % KEYS:02d}" for i in newest_per_key(n)]
    view.cancel()  # type: ignore[attr-defined]
    _, plain = await subscribe(a.broker, topic, "plain", compacted=False)
    replay = await receive(plain, n - first)
    assert replay[0].msg_id.topic_offset == first, "without the view: what retention kept"
    plain.cancel()  # type: ignore[attr-defined]

    res = rig.resources
    own = await res.get_owner(t)
    assert own is not None and await res.mark_moving(own, b.broker.cfg.broker_id) is not None
    await wait_until(lambda: _owner_is(res, t, b.broker.cfg.broker_id), timeout_s=20, what="moved")
    await wait_until(lambda: topic in b.broker.registry.topics, what="loaded on the new owner")
    pid2 = (await producer(b.broker, topic, "p2")).producer_id  # opens the log there
    moved = reliable(b.broker, topic).compaction_info()
    assert moved is not None and moved.horizon == n
    assert any("loaded from object storage" in r.getMessage() for r in caplog.records)
    pub2 = b.broker.producers.PublishBatches()
    await pub2.write(keyed_batch(pid2, 1, n, 3))  # keys 0..2 again, after the horizon
    assert (await pub2.read()).first_offset == n
    await pub2.done_writing()
    _, view2 = await subscribe(b.broker, topic, "view2", compacted=True)
    again = await receive(view2, KEYS + 3)
    assert [m.msg_id.topic_offset for m in again] == [*newest_per_key(n), n, n + 1, n + 2]
    view2.cancel()  # type: ignore[attr-defined]


async def test_compaction_is_refused_for_a_topic_this_broker_does_not_serve(rig: Rig) -> None:  # noqa: F811
    a = await rig.start_node()
    stats = apb_grpc.BrokerStatsServiceStub(a.broker.channel)
    with pytest.raises(grpc.aio.AioRpcError):
        await stats.CompactTopic(apb.CompactTopicRequest(name=f"/default/{unique('nowhere')}"), timeout=10)


async def test_deleting_a_compacted_topic_frees_its_view(rig: Rig) -> None:  # noqa: F811
    """A deleted topic's owner removes its local log (the view's file with it) and its objects
    of that incarnation, the compacted view's included; the view's etcd record goes with the
    topic's storage keys. (The in-process uploader names its objects without the incarnation,
    so only the view's objects are looked at here.)"""
    node = await rig.start_node()
    b = node.broker
    topic = f"/default/{unique('gone')}"
    t = TopicName.parse(topic)
    pid = (await producer(b, topic)).producer_id
    pub = b.producers.PublishBatches()
    for seq in range(4):
        await pub.write(keyed_batch(pid, seq, seq * 50, 50))
        assert not (await pub.read()).HasField("error")
    await pub.done_writing()
    rt = reliable(b, topic)
    info = await apb_grpc.BrokerStatsServiceStub(b.channel).CompactTopic(apb.CompactTopicRequest(name=topic))
    assert info.keys == KEYS
    stint = rt.stint
    assert stint is not None and stint.incarnation
    views = "compacted/" + incarnation_prefix(t, stint.incarnation)
    assert len(await rig.objects.list(views)) == 1
    directory = node.data_dir / t.namespace / t.local
    assert any(p.suffix == ".view" for p in directory.iterdir())
    assert await rig.store.get(rig.keys.compaction(t)) is not None

    await rig.resources.delete_topic(t)

    async def freed() -> bool:
        return not await rig.objects.list(views) and not directory.exists()

    await wait_until(freed, timeout_s=20, what="the deleted topic's view and local log removed")
    assert await rig.store.get(rig.keys.compaction(t)) is None
