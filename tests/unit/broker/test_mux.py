"""PublishMux and ConsumeMux against the in-memory registry: their pure parts in tables, and
their loops fed from a queue (no gRPC)."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from typing import Any

import pytest

from danube_broker.dispatch.base import SubType
from danube_broker.mux import READ_REPORT_EVERY, PublishMux, lane_session
from danube_broker.mux_consume import ConsumeMux, delivery_frames, round_of
from danube_common.errors import TopicNotOwned, Unavailable
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.resources import Resources
from tests.unit.broker.fake_log import FakeLogs
from tests.unit.broker.helpers import msgs
from tests.unit.broker.test_registry import registry, resources  # noqa: F401  (fixture)
from tests.unit.broker.test_reliable_topic import Rig as ReliableRig

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


@pytest.mark.parametrize(
    ("current", "incoming", "expected"),
    [(1, 1, (1, False)), (1, 2, (2, True)), (3, 2, (3, False)), (0, 1, (1, True))],
)
def test_only_a_higher_session_starts_a_fresh_order_guard(
    current: int, incoming: int, expected: tuple[int, bool]
) -> None:
    assert lane_session(current, incoming) == expected


def test_a_round_serves_the_consumers_ready_now_once_each() -> None:
    ready = collections.deque([3, 1, 2])
    assert round_of(ready) == [3, 1, 2]
    assert not ready


def test_a_delivery_too_big_for_one_frame_is_split_in_order() -> None:
    batch = msgs(8, size=1000)
    frames = delivery_frames(7, batch, limit_bytes=3000)
    assert len(frames) > 1 and all(f.consumer_id == 7 for f in frames)
    assert [m.payload for f in frames for m in f.delivery.messages] == [m.payload for m in batch]
    assert delivery_frames(7, batch, limit_bytes=10**6)[0].delivery.messages[0].payload == batch[0].payload


class Feed:
    """An async iterator of client frames, fed by the test; ``end()`` half-closes it."""

    def __init__(self) -> None:
        self.q: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, *items: Any) -> None:
        for i in items:
            self.q.put_nowait(i)

    def end(self) -> None:
        self.q.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[Any]:
        while (item := await self.q.get()) is not None:
            yield item


def batch(pid: int, seq: int, n: int = 1, session: int = 1) -> pb.PublishBatch:
    return pb.PublishBatch(producer_id=pid, batch_seq=seq, session=session, messages=msgs(n))


async def collect(gen: AsyncIterator[Any], n: int) -> list[Any]:
    """The next ``n`` acks / events of the responses (fewer if the stream ends)."""
    out: list[Any] = []
    async with asyncio.timeout(5):
        while len(out) < n:
            response = await anext(gen, None)
            if response is None:
                break
            items = response.acks if isinstance(response, pb.PublishMuxResponse) else response.events
            out.extend(items)
    assert len(out) <= n, f"more than {n} items: {out}"
    return out


async def test_publish_mux_acks_in_order_per_producer_and_isolates_a_detach(resources: Resources) -> None:  # noqa: F811
    reg = registry(resources)
    a = await reg.create_producer("/default/a", "pa", exclusive=False, dispatch_strategy="non_reliable")
    b = await reg.create_producer("/default/b", "pb", exclusive=False, dispatch_strategy="non_reliable")
    opened: list[int] = []
    mux = PublishMux(reg, depth=4, max_bytes=1 << 20, on_open_close=opened.append)
    feed = Feed()
    gen = mux.run(feed)  # type: ignore[arg-type]
    feed.put(pb.PublishMuxRequest(batches=[pb.PublishBatch(producer_id=a.id, session=1)]))  # bind: no answer
    feed.put(*(pb.PublishMuxRequest(batches=[batch(p.id, s) for p in (a, b)]) for s in (1, 2, 3)))
    acks = await collect(gen, 6)
    for p in (a, b):
        assert [x.batch_seq for x in acks if x.producer_id == p.id] == [1, 2, 3]
    assert a.open_streams == 1 and b.open_streams == 1 and opened == [1]
    reg.unload("/default/a", TopicNotOwned("moved", redirect="http://elsewhere:1"))
    (event,) = await collect(gen, 1)
    assert event.producer_id == a.id and event.batch_seq == 0
    assert event.error.code == "TOPIC_NOT_OWNED" and event.error.redirect == "http://elsewhere:1"
    feed.put(pb.PublishMuxRequest(batches=[batch(b.id, 4), batch(a.id, 4)]))
    late = {x.producer_id: x for x in await collect(gen, 2)}
    assert not late[b.id].HasField("error") and late[a.id].error.code == "TOPIC_NOT_OWNED"
    feed.end()
    assert await collect(gen, 1) == []  # the client half-closed: the stream ends
    assert opened == [1, -1] and b.open_streams == 0


async def test_consume_mux_serves_consumers_by_credit_and_answers_acks(resources: Resources) -> None:  # noqa: F811
    reg = registry(resources)
    p = await reg.create_producer("/default/c", "p", exclusive=False, dispatch_strategy="non_reliable")
    c1 = await reg.subscribe("/default/c", subscription="s1", consumer_name="c1", sub_type=SubType.EXCLUSIVE)
    c2 = await reg.subscribe("/default/c", subscription="s2", consumer_name="c2", sub_type=SubType.SHARED)
    mux = ConsumeMux(reg, max_messages_per_frame=100, frame_limit_bytes=1 << 20)
    feed = Feed()
    gen = mux.run(feed)  # type: ignore[arg-type]
    feed.put(
        pb.ConsumeMuxRequest(
            attach=[
                pb.MuxAttach(consumer_id=c1.id, max_messages_per_frame=2, credits=1),
                pb.MuxAttach(consumer_id=c2.id, credits=3),
            ]
        )
    )
    await reg.publish(p, msgs(5), 5)
    first = await collect(gen, 2)
    by = {e.consumer_id: [m.payload for m in e.delivery.messages] for e in first}
    assert len(by[c1.id]) == 2 and len(by[c2.id]) == 5  # c1: one credit, two per frame
    feed.put(
        pb.ConsumeMuxRequest(
            credits=[pb.MuxCredit(consumer_id=c1.id, frames=2)],
            acks=[pb.MuxAck(request_id=9, consumer_id=c2.id, topic_offsets=[0], cumulative=True)],
        )
    )
    rest = await collect(gen, 3)
    kinds = collections.Counter(e.WhichOneof("event") for e in rest)
    assert kinds == {"delivery": 2, "ack_result": 1}
    (result,) = [e.ack_result for e in rest if e.WhichOneof("event") == "ack_result"]
    assert result.request_id == 9 and result.error.code == "FAILED_PRECONDITION"
    await reg.close_consumer(c1.id, unsubscribe=False)
    (closed,) = await collect(gen, 1)
    assert closed.consumer_id == c1.id and closed.WhichOneof("event") == "closed"
    feed.end()
    assert await collect(gen, 1) == []
    assert not c2.connected


async def test_an_error_of_unknown_outcome_ends_the_lane_without_answering_the_batch(
    resources: Resources,  # noqa: F811
) -> None:
    # E.g. a cloud-durability topic closing while the batch waits for object storage: the batch
    # may be stored. Answering it as refused would make the client re-send it with fresh
    # sequence ids (stored twice); the lane ends instead and the client re-sends it as it was.
    reg = registry(resources)
    a = await reg.create_producer("/default/a", "pa", exclusive=False, dispatch_strategy="non_reliable")
    b = await reg.create_producer("/default/b", "pb", exclusive=False, dispatch_strategy="non_reliable")
    real_publish = reg.publish
    published: list[int] = []

    async def publish(producer: Any, batch_msgs: Any, nbytes: int, **kw: Any) -> Any:
        published.append(producer.id)
        if producer is a and len(published) > 2:
            raise Unavailable("topic closed before object storage confirmed the batch")
        return await real_publish(producer, batch_msgs, nbytes, **kw)

    reg.publish = publish  # type: ignore[method-assign]
    mux = PublishMux(reg, depth=8, max_bytes=1 << 20)
    feed = Feed()
    gen = mux.run(feed)  # type: ignore[arg-type]
    feed.put(pb.PublishMuxRequest(batches=[batch(a.id, 1), batch(b.id, 1)]))
    assert sorted((x.producer_id, x.batch_seq) for x in await collect(gen, 2)) == [(a.id, 1), (b.id, 1)]
    feed.put(pb.PublishMuxRequest(batches=[batch(a.id, 2)]))
    (event,) = await collect(gen, 1)
    assert (event.producer_id, event.batch_seq, event.error.code) == (a.id, 0, "UNAVAILABLE")
    assert event.error.retryable
    calls = len(published)
    feed.put(pb.PublishMuxRequest(batches=[batch(a.id, 3), batch(b.id, 2)]))
    late = {x.producer_id: x for x in await collect(gen, 2)}
    assert late[a.id].batch_seq == 3 and late[a.id].error.retryable  # refused in-band: not published
    assert not late[b.id].HasField("error")
    assert published[calls:] == [b.id]
    feed.end()
    assert await collect(gen, 1) == []


async def test_publish_mux_tells_the_client_how_many_frames_it_read(resources: Resources) -> None:  # noqa: F811
    reg = registry(resources)
    a = await reg.create_producer("/default/a", "pa", exclusive=False, dispatch_strategy="non_reliable")
    mux = PublishMux(reg, depth=64, max_bytes=1 << 20)
    feed = Feed()
    gen = mux.run(feed)  # type: ignore[arg-type]
    bind = pb.PublishMuxRequest(batches=[pb.PublishBatch(producer_id=a.id, session=1)])
    # Frames that need no answer: the count is sent on its own once READ_REPORT_EVERY are read,
    # or a client waiting to hear of them would wait forever.
    feed.put(*[bind] * READ_REPORT_EVERY)
    async with asyncio.timeout(5):
        first = await anext(gen)
    assert list(first.acks) == [] and first.frames_read == READ_REPORT_EVERY
    # Acks carry the count too.
    feed.put(pb.PublishMuxRequest(batches=[batch(a.id, 1)]))
    async with asyncio.timeout(5):
        second = await anext(gen)
    assert [x.batch_seq for x in second.acks] == [1] and second.frames_read == READ_REPORT_EVERY + 1
    feed.end()
    assert await collect(gen, 1) == []


async def test_consume_mux_answers_the_acks_of_a_clients_last_frames_before_it_ends(
    resources: Resources,  # noqa: F811
) -> None:
    reg = registry(resources)
    await reg.create_producer("/default/d", "p", exclusive=False, dispatch_strategy="non_reliable")
    c = await reg.subscribe("/default/d", subscription="s", consumer_name="c", sub_type=SubType.SHARED)
    mux = ConsumeMux(reg, max_messages_per_frame=100, frame_limit_bytes=1 << 20)
    feed = Feed()
    gen = mux.run(feed)  # type: ignore[arg-type]
    ack = lambda r: pb.ConsumeMuxRequest(acks=[pb.MuxAck(request_id=r, consumer_id=c.id, topic_offsets=[0])])  # noqa: E731
    feed.put(ack(1))
    (first,) = await collect(gen, 1)  # the stream is now paused at this response
    assert first.ack_result.request_id == 1
    # More acks and the half-close are read while the response is out: still answered.
    feed.put(ack(2), ack(3))
    feed.end()
    for _ in range(10):
        await asyncio.sleep(0)
    rest = await collect(gen, 3)
    assert sorted(e.ack_result.request_id for e in rest) == [2, 3]


async def test_publish_mux_publishes_without_tasks_and_never_lets_a_batch_overtake_a_task(
    resources: Resources,  # noqa: F811
) -> None:
    """Reliable batches go through ``publish_now``; once one of a lane needs a task, the lane's
    later batches take one too until it is answered, so the log keeps the producer's order."""
    rig = ReliableRig(resources, FakeLogs(auto_commit=True))
    p = await rig.producer()
    reliable = rig.topic.reliable
    assert reliable is not None
    plain = reliable.publish_now
    calls: list[bool] = []

    def declining_first(*args: Any) -> bool:
        taken = bool(calls) and plain(*args)
        calls.append(taken)
        return taken

    reliable.publish_now = declining_first  # type: ignore[method-assign]
    mux = PublishMux(rig.reg, depth=16, max_bytes=1 << 20)
    feed = Feed()
    gen = mux.run(feed)  # type: ignore[arg-type]
    first = [pb.PublishBatch(producer_id=p.id, batch_seq=s, session=1, messages=msgs(1)) for s in (1, 2)]
    for b, seq in zip(first, (1, 2), strict=True):
        b.messages[0].sequence_id = seq
        b.messages[0].payload = b"m%d" % seq
    feed.put(pb.PublishMuxRequest(batches=first))
    acks = await collect(gen, 2)
    assert [(a.batch_seq, a.first_offset) for a in acks] == [(1, 0), (2, 1)]
    assert calls == [False], "the second batch waited for the first one's task"
    stored = [pb.StreamMessage.FromString(e.record).payload for e in rig.log.read(0, 2)]  # type: ignore[union-attr]
    assert stored == [b"m1", b"m2"]
    later = pb.PublishBatch(producer_id=p.id, batch_seq=3, session=1, messages=msgs(1))
    later.messages[0].sequence_id = 3
    feed.put(pb.PublishMuxRequest(batches=[later]))
    (ack,) = await collect(gen, 1)
    assert (ack.batch_seq, ack.first_offset) == (3, 2) and calls == [False, True], "no task once answered"
    feed.end()
    assert await collect(gen, 1) == []
    await rig.close()
