"""Pure parts of the SDK, no sockets: hashing, routing, backoff, ack buffering, receive queue."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.errors import Unavailable
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.acks import AckBuffer
from danube_sdk.mux import detail_error
from danube_sdk.receive_queue import ReceiveQueue
from danube_sdk.retry import backoff_s
from danube_sdk.routing import PartitionRouter, fnv1a64, partition_for_key
from danube_sdk.types import Message, RoutingMode

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xCBF29CE484222325),
        (b"a", 0xAF63DC4C8601EC8C),
        (b"foobar", 0x85944171F73967E8),
    ],
)
def test_fnv1a64_known_vectors(data: bytes, expected: int) -> None:
    assert fnv1a64(data) == expected


def test_partition_for_key_hashes_utf8() -> None:
    assert partition_for_key("a", 7) == 0xAF63DC4C8601EC8C % 7
    assert partition_for_key("é", 5) == fnv1a64("é".encode()) % 5


@given(st.text(), st.integers(min_value=1, max_value=64))
def test_keyed_routing_is_stable_and_in_range(key: str, n: int) -> None:
    router = PartitionRouter(n, RoutingMode.ROUND_ROBIN)
    first = router.choose(key)
    assert 0 <= first < n and router.choose(key) == first


def test_round_robin_cycles_and_keys_do_not_disturb_it() -> None:
    router = PartitionRouter(3, RoutingMode.ROUND_ROBIN)
    picks = [router.choose(None) for _ in range(4)]
    router.choose("k")
    picks += [router.choose(None) for _ in range(2)]
    assert picks == [0, 1, 2, 0, 1, 2]


def test_single_partition_sticks() -> None:
    router = PartitionRouter(5, RoutingMode.SINGLE_PARTITION, rng=random.Random(3))
    assert len({router.choose(None) for _ in range(20)}) == 1


def test_backoff_grows_to_the_cap_with_jitter() -> None:
    assert backoff_s(0, rand=lambda: 0.0) == pytest.approx(0.05)
    assert backoff_s(0, rand=lambda: 1.0) == pytest.approx(0.1)
    assert backoff_s(3, rand=lambda: 1.0) == pytest.approx(0.8)
    assert backoff_s(10, rand=lambda: 1.0) == pytest.approx(2.0)
    assert backoff_s(1000, rand=lambda: 0.5) == pytest.approx(1.5)
    assert all(0.05 <= backoff_s(a) <= 2.0 for a in range(50))


def test_ack_buffer_groups_by_topic_in_ack_order() -> None:
    buf = AckBuffer()
    for topic, off in [("t-part-0", 3), ("t-part-1", 1), ("t-part-0", 1), ("t-part-0", 2)]:
        buf.add(topic, off)
    assert buf.count == 4
    assert buf.take() == {"t-part-0": [3, 1, 2], "t-part-1": [1]}
    assert buf.count == 0 and buf.take() == {}


def _msg(i: int) -> Message:
    from danube_common.pb import DanubeApi_pb2 as pb

    return Message(pb.StreamMessage(payload=b"%d" % i, msg_id=pb.MsgID(topic_name="/d/t", topic_offset=i)))


async def test_receive_queue_blocks_writers_when_full_and_fails_after_drain() -> None:
    q = ReceiveQueue(2)
    await q.put_many([_msg(0), _msg(1)])
    writer = asyncio.create_task(q.put_many([_msg(2)]))
    await asyncio.sleep(0)  # let the writer run up to its wait
    assert not writer.done() and len(q) == 2
    assert (await q.get()).offset == 0
    await writer
    q.fail(Unavailable("gone"))
    assert [(await q.get()).offset, (await q.get()).offset] == [1, 2]
    with pytest.raises(Unavailable):
        await q.get()


def _pmsg(topic: str, i: int) -> Message:
    from danube_common.pb import DanubeApi_pb2 as pb

    return Message(pb.StreamMessage(payload=b"%d" % i, msg_id=pb.MsgID(topic_name=topic, topic_offset=i)))


async def test_receive_queue_takes_partitions_in_turn_keeping_each_order() -> None:
    q = ReceiveQueue(100, partitions=3)
    await q.put_many([_pmsg("/d/t-part-0", i) for i in range(4)])
    await q.put_many([_pmsg("/d/t-part-1", i) for i in range(2)])
    await q.put_many([_pmsg("/d/t-part-2", 7)])
    got = [(m.topic[-1], m.offset) for m in q.take(100)]
    assert got == [("0", 0), ("1", 0), ("2", 7), ("0", 1), ("1", 1), ("0", 2), ("0", 3)]
    assert len(q) == 0 and q.get_nowait() is None


async def test_receive_queue_busy_partition_uses_the_buffer_but_cannot_starve_another() -> None:
    q = ReceiveQueue(4, partitions=2)  # share: 2 per partition
    await q.put_many([_pmsg("/d/a", i) for i in range(4)])  # the whole buffer, the other is idle
    busy = asyncio.create_task(q.put_many([_pmsg("/d/a", 4)]))
    other = asyncio.create_task(q.put_many([_pmsg("/d/b", 0), _pmsg("/d/b", 1)]))
    await asyncio.sleep(0)
    assert other.done() and not busy.done()  # b is under its share: it may add to a full buffer
    assert q.buffered("/d/b") == 2 and len(q) == 6
    # a waits until the buffer is under capacity again.
    assert [m.topic for m in q.take(2)] == ["/d/a", "/d/b"]
    await asyncio.sleep(0)
    assert not busy.done() and len(q) == 4
    q.get_nowait()
    await asyncio.wait_for(busy, 1)
    assert q.buffered("/d/a") == 3


async def test_receive_queue_purge_and_fail_release_writers() -> None:
    q = ReceiveQueue(2, partitions=1)
    await q.put_many([_pmsg("/d/a", 0), _pmsg("/d/a", 1)])
    writer = asyncio.create_task(q.put_many([_pmsg("/d/a", 2)]))
    await asyncio.sleep(0)
    assert not writer.done()
    assert q.purge("/d/a") == 2 and len(q) == 0
    await asyncio.wait_for(writer, 1)
    assert (await q.get()).offset == 2
    blocked = [asyncio.create_task(q.put_many([_pmsg("/d/a", i)])) for i in (3, 4, 5)]
    await asyncio.sleep(0)
    q.fail(Unavailable("gone"))
    await asyncio.wait_for(asyncio.gather(*blocked), 1)


@pytest.mark.parametrize(
    ("detail", "cls", "retryable", "redirect"),
    [
        (pb.ErrorDetail(), "Unavailable", True, None),
        (
            pb.ErrorDetail(
                code="TOPIC_NOT_OWNED", grpc_code=14, message="m", retryable=True, redirect="http://b:1"
            ),
            "TopicNotOwned",
            True,
            "http://b:1",
        ),
        (
            pb.ErrorDetail(code="FAILED_PRECONDITION", grpc_code=9, message="m"),
            "FailedPrecondition",
            False,
            None,
        ),
        # The broker's flag decides: a code this client does not know, marked retryable.
        (
            pb.ErrorDetail(code="SOMETHING_NEW", grpc_code=9, message="m", retryable=True),
            "Unavailable",
            True,
            None,
        ),
    ],
)
def test_an_in_band_mux_error_maps_to_its_class_with_redirect(
    detail: pb.ErrorDetail, cls: str, retryable: bool, redirect: str | None
) -> None:
    err = detail_error(detail, "detached")
    assert type(err).__name__ == cls and err.retryable is retryable and err.redirect == redirect
