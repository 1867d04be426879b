"""Idempotent publishing against the fake broker: sequence ids, dedup, resends, batch refusals."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from danube_common.errors import (
    ERRORS_BY_CODE,
    DanubeError,
    InvalidArgument,
    MessageTooLarge,
    ResourceExhausted,
    Timeout,
    Unavailable,
)
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import DanubeClient, DispatchStrategy
from danube_sdk.batch import error_from_detail
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/idem"


def seqs(cluster: FakeCluster, broker: int | None = None) -> list[list[int]]:
    """Sequence ids of every frame the broker(s) received, frame by frame."""
    return [
        [m.sequence_id for m in f.messages] for f in cluster.frames if broker is None or f.broker == broker
    ]


def refusal(code: str, status: grpc.StatusCode, *, retryable: bool) -> pb.ErrorDetail:
    return pb.ErrorDetail(code=code, grpc_code=status.value[0], message=f"{code} (fake)", retryable=retryable)


async def test_sequence_ids_start_above_the_brokers_last_and_increase(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    cluster.topics[T].sequences["p1"] = 41  # a previous run of producer p1 stored up to 41
    producer = await client.create_producer(
        T, producer_name="p1", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    await producer.send(b"a")
    await producer.send_many([b"b", b"c", b"d"])
    assert [s for frame in seqs(cluster) for s in frame] == [42, 43, 44, 45]
    create = cluster.calls_of("CreateProducer")[0]
    assert isinstance(create, pb.ProducerRequest) and create.dispatch_strategy == pb.Reliable


async def test_no_sequence_ids_without_idempotence(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, enable_idempotence=False)
    await producer.send_many([b"a", b"b"])
    assert {s for frame in seqs(cluster) for s in frame} == {0}


async def test_a_lost_ack_is_resent_with_the_same_ids_and_not_stored_twice(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(T, producer_name="lossy")
    await producer.send(b"warm-up")
    cluster.break_after_publish = 1  # the next batch is stored, then the stream breaks unacked
    futs = [await producer.send_async(b"m%d" % i) for i in range(5)]
    ids = await asyncio.gather(*futs)

    assert [m.offset for m in ids] == [1, 2, 3, 4, 5]  # the offsets of the first (only) copies
    assert cluster.payloads(T) == [b"warm-up"] + [b"m%d" % i for i in range(5)]
    assert len(cluster.calls_of("CreateProducer")) == 2  # it did reconnect and resend
    assert seqs(cluster) == [[1], [2, 3, 4, 5, 6], [2, 3, 4, 5, 6]]
    assert cluster.unknown_duplicates == []
    assert (await producer.send(b"after")).offset == 6


async def test_an_ack_listing_offsets_maps_each_message(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    producer = await client.create_producer(T, producer_name="p")
    # Pretend sequence ids 1 and 2 of "p" were stored earlier, at offsets 1 and 3.
    topic = cluster.topics[T]
    topic.log.extend(pb.StreamMessage(payload=b"x%d" % i) for i in range(5))
    topic.sequences["p"] = 2
    topic.seq_offsets.update({("p", 1): 1, ("p", 2): 3})
    futs = [await producer.send_async(b"m%d" % i) for i in range(4)]  # one batch: ids 1..4
    ids = await asyncio.gather(*futs)
    assert [m.offset for m in ids] == [1, 3, 5, 6]
    assert seqs(cluster) == [[1, 2, 3, 4]]


async def test_a_resend_after_a_move_keeps_its_sequence_ids(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(T, producer_name="mover", batching_max_messages=3)
    await producer.send(b"first")
    cluster.ack_gate.clear()  # batches reach broker 0 and are never answered there
    futs = [await producer.send_async(b"%d" % i) for i in range(6)]
    await wait_until(lambda: len(cluster.frames) == 3, timeout_s=5, what="two batches on the wire")
    cluster.move(T, 1)
    cluster.ack_gate.set()
    ids = await asyncio.gather(*futs)
    assert [m.offset for m in ids] == list(range(1, 7))
    assert seqs(cluster, broker=0)[1:] == seqs(cluster, broker=1) == [[2, 3, 4], [5, 6, 7]]
    assert cluster.unknown_duplicates == []


@pytest.mark.parametrize(
    ("code", "status"),
    [("DISK_FULL", grpc.StatusCode.RESOURCE_EXHAUSTED), ("STORAGE_FAILED", grpc.StatusCode.UNAVAILABLE)],
)
async def test_a_retryable_refusal_keeps_the_order_without_loss(
    client: DanubeClient, cluster: FakeCluster, code: str, status: grpc.StatusCode
) -> None:
    """Batch A is refused (not stored); batch B behind it on the stream is refused too (the
    broker's order guard): both are retried, in order, with fresh ids."""
    producer = await client.create_producer(T, batching_max_publish_delay_ms=1)
    cluster.ack_gate.clear()
    a = await producer.send_async(b"A")
    await wait_until(lambda: len(cluster.frames) == 1, timeout_s=5, what="A on the wire")
    b = await producer.send_async(b"B")
    await wait_until(lambda: len(cluster.frames) == 2, timeout_s=5, what="B on the wire")
    cluster.refuse_next.append(refusal(code, status, retryable=True))  # A only
    cluster.ack_gate.set()

    assert (await a).offset == 0
    assert (await b).offset == 1
    assert cluster.payloads(T) == [b"A", b"B"]
    assert cluster.unknown_duplicates == []
    a_ids = [f.messages[0].sequence_id for f in cluster.frames if f.messages[0].payload == b"A"]
    b_ids = [f.messages[0].sequence_id for f in cluster.frames if f.messages[0].payload == b"B"]
    assert a_ids == [1, 3] and b_ids == [2, 4]  # fresh ids, in the original order


async def test_retryable_refusals_give_up_at_send_timeout(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, send_timeout_s=0.5)
    cluster.refuse_next.extend(
        refusal("DISK_FULL", grpc.StatusCode.RESOURCE_EXHAUSTED, retryable=True) for _ in range(1000)
    )
    with pytest.raises(Timeout, match="not acknowledged within"):
        await producer.send(b"never stored")
    assert producer.pending == 0
    cluster.refuse_next.clear()

    async def recovered() -> bool:  # sends may still time out while the producer backs off
        try:
            mid = await producer.send(b"disk has room again")
        except Timeout:
            return False
        return cluster.payloads(T)[mid.offset] == b"disk has room again"

    await wait_until(recovered, timeout_s=10, what="a send to succeed once the disk has room")


@pytest.mark.parametrize(
    ("detail", "error"),
    [
        (refusal("SCHEMA_MISMATCH", grpc.StatusCode.INVALID_ARGUMENT, retryable=False), InvalidArgument),
        # The broker's flag decides, not the status's class.
        (refusal("STORAGE_FAILED", grpc.StatusCode.UNAVAILABLE, retryable=False), Unavailable),
    ],
)
async def test_a_non_retryable_refusal_fails_the_futures(
    client: DanubeClient, cluster: FakeCluster, detail: pb.ErrorDetail, error: type[DanubeError]
) -> None:
    producer = await client.create_producer(T)
    cluster.refuse_next.append(detail)
    with pytest.raises(error, match=f"{detail.code} \\(fake\\)"):
        await producer.send(b"refused")
    assert (await producer.send(b"next")).offset == 0
    assert len(cluster.frames) == 2 and len(cluster.calls_of("CreateProducer")) == 1


@pytest.mark.parametrize(
    ("code", "status", "cls"),
    [
        ("DISK_FULL", grpc.StatusCode.RESOURCE_EXHAUSTED, ResourceExhausted),
        ("STORAGE_FAILED", grpc.StatusCode.UNAVAILABLE, Unavailable),
    ],
)
def test_storage_refusals_map_to_retryable_errors(
    code: str, status: grpc.StatusCode, cls: type[DanubeError]
) -> None:
    """Known codes map to their class, codes this client does not know to their status's."""
    err = error_from_detail(refusal(code, status, retryable=True))
    assert isinstance(err, cls) and err.retryable
    assert err.code == (code if code in ERRORS_BY_CODE else cls.code)


async def test_a_reconnect_continues_above_a_higher_last_sequence_id(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    """Someone else stored higher ids under our name meanwhile: new messages go above them
    rather than being dropped as duplicates."""
    producer = await client.create_producer(T, producer_name="twin")
    await producer.send(b"one")
    cluster.topics[T].sequences["twin"] = 100
    cluster.move(T, 1)
    await wait_until(lambda: cluster.calls_of("CreateProducer", broker=1), timeout_s=5, what="re-created")
    mid = await producer.send(b"two")
    assert cluster.payloads(T)[mid.offset] == b"two"
    assert seqs(cluster) == [[1], [101]]
    assert cluster.unknown_duplicates == []


# ---------------------------------------------------------------- explicit sequence ids


async def test_explicit_ids_replayed_by_a_new_producer_are_stored_once(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    """A first run stored the messages numbered 1..3 of 1..5 (then died); a second producer of the
    same name re-sends all five with the same ids: the broker keeps one copy of each, and the
    ids are not renumbered above the broker's last."""
    first = await client.create_producer(T, producer_name="replay")
    for i in range(3):
        await first.send(b"m%d" % i, sequence_id=10 + i)
    await first.close()
    second = await client.create_producer(T, producer_name="replay")
    futs = [await second.send_async(b"m%d" % i, sequence_id=10 + i) for i in range(5)]
    ids = await asyncio.gather(*futs)
    assert cluster.payloads(T) == [b"m%d" % i for i in range(5)]
    assert [m.offset for m in ids] == [0, 1, 2, 3, 4]  # the copies map to the stored offsets
    assert [s for frame in seqs(cluster) for s in frame][-5:] == [10, 11, 12, 13, 14]


async def test_explicit_ids_survive_a_lost_ack_unchanged(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, producer_name="lossy-explicit")
    await producer.send(b"warm-up", sequence_id=100)
    cluster.break_after_publish = 1
    futs = [await producer.send_async(b"m%d" % i, sequence_id=200 + 2 * i) for i in range(3)]
    await asyncio.gather(*futs)
    assert cluster.payloads(T) == [b"warm-up", b"m0", b"m1", b"m2"]
    assert seqs(cluster) == [[100], [200, 202, 204], [200, 202, 204]]


async def test_explicit_ids_are_checked(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, producer_name="checked")
    await producer.send(b"a", sequence_id=5)
    with pytest.raises(InvalidArgument, match="not above 5"):
        await producer.send_async(b"b", sequence_id=5)
    with pytest.raises(InvalidArgument, match="every message or for none"):
        await producer.send_async(b"c")
    plain = await client.create_producer(T, producer_name="plain", enable_idempotence=False)
    with pytest.raises(InvalidArgument, match="idempotent"):
        await plain.send_async(b"d", sequence_id=1)
    big = b"x" * 5000  # over the fake broker's 4096-byte limit: never chunked with an explicit id
    fut = await producer.send_async(big, sequence_id=6)
    with pytest.raises(MessageTooLarge):
        await fut
