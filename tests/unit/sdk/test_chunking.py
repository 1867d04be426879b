"""Compression and chunking in the SDK: splitting (pure), the chunk assembler (pure), and the
producer/consumer pair against the fake broker (chunks on the wire, acks and nacks of every
chunk, the codec carried per message)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.compression import Compression, compress
from danube_common.errors import UnsupportedCompression
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import ClientTimeout, DanubeClient, SubType
from danube_sdk.chunking import ChunkAssembler, PackedMessage, build_messages, split
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/big"
LIMIT = 4096  # the fake broker's max_message_size_bytes


# ---------------------------------------------------------------- split (pure)


@given(st.binary(max_size=3000), st.integers(min_value=1, max_value=700))
def test_split_covers_the_payload_in_order_within_the_limit(payload: bytes, size: int) -> None:
    pieces = split(payload, size)
    assert b"".join(pieces) == payload
    assert all(len(p) <= size for p in pieces)
    assert all(len(p) == size for p in pieces[:-1])
    assert len(pieces) == max(1, -(-len(payload) // size))


def test_split_refuses_a_zero_limit() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        split(b"abc", 0)


# ---------------------------------------------------------------- assembler (pure)


def chunk(
    uuid: str, index: int, count: int, payload: bytes, offset: int, total: int | None = None
) -> pb.StreamMessage:
    m = pb.StreamMessage(payload=payload, msg_id=pb.MsgID(topic_offset=offset, topic_name=T))
    m.chunk.message_uuid, m.chunk.index, m.chunk.count = uuid, index, count
    m.chunk.total_size = total if total is not None else len(payload) * count
    return m


def assembler(timeout_s: float = 10.0, max_pending: int = 10) -> ChunkAssembler:
    return ChunkAssembler(timeout_s=timeout_s, max_pending=max_pending, topic=T)


def test_chunks_complete_in_any_order_interleaved_with_other_messages() -> None:
    a = assembler()
    assert a.add(chunk("u1", 1, 3, b"bb", 11), 0.0) is None
    assert a.add(chunk("u2", 0, 2, b"xx", 12), 0.0) is None
    assert a.add(chunk("u1", 0, 3, b"aa", 10), 0.0) is None
    assert a.pending == 2
    done = a.add(chunk("u1", 2, 3, b"cc", 13), 0.0)
    assert done is not None and [c.payload for c in done] == [b"aa", b"bb", b"cc"]
    assert a.pending == 1 and a.dropped == 0 and a.take_dropped() == []


def test_a_redelivered_chunk_replaces_its_copy() -> None:
    a = assembler()
    a.add(chunk("u", 0, 2, b"aa", 1), 0.0)
    a.add(chunk("u", 0, 2, b"aa", 1), 1.0)
    done = a.add(chunk("u", 1, 2, b"bb", 2), 2.0)
    assert done is not None and [c.msg_id.topic_offset for c in done] == [1, 2]


def test_incomplete_messages_time_out_and_their_chunks_are_handed_back_for_acking() -> None:
    a = assembler(timeout_s=5.0)
    a.add(chunk("dead", 0, 3, b"aa", 1), 0.0)
    a.add(chunk("dead", 1, 3, b"bb", 2), 2.0)
    a.add(chunk("live", 0, 2, b"xx", 3), 6.0)
    a.expire(6.9)  # 4.9 s since the last chunk of "dead"
    assert a.dropped == 0
    a.expire(7.0)
    assert a.dropped == 1 and a.pending == 1
    assert a.take_dropped() == [1, 2]
    assert a.take_dropped() == []


def test_touch_restarts_the_timeout() -> None:
    a = assembler(timeout_s=5.0)
    a.add(chunk("slow", 0, 2, b"aa", 1), 0.0)
    a.touch(4.0)  # the reader was waiting for room in the receive queue
    a.expire(8.0)
    assert a.dropped == 0
    a.expire(9.0)
    assert a.dropped == 1


def test_past_max_pending_the_oldest_incomplete_message_is_dropped() -> None:
    a = assembler(max_pending=2)
    a.add(chunk("a", 0, 2, b"1", 1), 0.0)
    a.add(chunk("b", 0, 2, b"2", 2), 1.0)
    a.add(chunk("a", 1, 3, b"x", 3), 2.0)  # inconsistent count: "a" and this chunk dropped
    assert a.dropped == 1 and sorted(a.take_dropped()) == [1, 3]
    a.add(chunk("c", 0, 2, b"3", 4), 3.0)
    a.add(chunk("d", 0, 2, b"4", 5), 4.0)
    assert a.dropped == 2 and a.take_dropped() == [2] and a.pending == 2


def test_a_size_mismatch_drops_the_message() -> None:
    a = assembler()
    a.add(chunk("u", 0, 2, b"aa", 1, total=5), 0.0)
    assert a.add(chunk("u", 1, 2, b"bb", 2, total=5), 0.0) is None
    assert a.dropped == 1 and a.take_dropped() == [1, 2]


def test_build_messages_wraps_only_what_needs_it() -> None:
    a = assembler()
    plain = pb.StreamMessage(payload=b"plain", msg_id=pb.MsgID(topic_offset=1))
    packed = pb.StreamMessage(
        payload=compress(Compression.ZSTD, b"z" * 100),
        compression=pb.PAYLOAD_COMPRESSION_ZSTD,
        msg_id=pb.MsgID(topic_offset=2),
    )
    whole = compress(Compression.LZ4, b"L" * 5000)
    half = len(whole) // 2
    c0 = chunk("u", 0, 2, whole[:half], 3, total=len(whole))
    c1 = chunk("u", 1, 2, whole[half:], 4, total=len(whole))
    c0.compression = c1.compression = pb.PAYLOAD_COMPRESSION_LZ4
    msgs = build_messages([plain, packed, c0, c1], T, None, a, 0.0)
    assert [type(m).__name__ for m in msgs] == ["Message", "PackedMessage", "PackedMessage"]
    assert [m.payload for m in msgs] == [b"plain", b"z" * 100, b"L" * 5000]
    assert [m.chunk_offsets for m in msgs] == [(), (), (3, 4)]
    assert msgs[2].offset == 3 and "chunks=2" in repr(msgs[2])


def test_an_unknown_codec_raises_on_payload_and_value() -> None:
    raw = pb.StreamMessage(payload=b"????", msg_id=pb.MsgID(topic_offset=1))
    raw.compression = 9  # type: ignore[assignment]  # a newer producer's codec
    (msg,) = build_messages([raw], T, None, assembler(), 0.0)
    assert isinstance(msg, PackedMessage) and msg.compression == 9
    with pytest.raises(UnsupportedCompression, match="codec 9"):
        _ = msg.payload
    with pytest.raises(UnsupportedCompression):
        msg.value()
    assert "compression=9" in repr(msg)


# ---------------------------------------------------------------- against the fake broker


async def test_compressed_messages_travel_compressed_and_arrive_plain(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s", sub_type=SubType.EXCLUSIVE)
    producer = await client.create_producer(T, compression="zstd", pack_batches=False)
    doc = json.dumps({"order": 1, "items": ["pen"] * 50}).encode()
    await producer.send_many([doc, b"x"])
    stored = cluster.topics[T].log
    assert stored[0].compression == pb.PAYLOAD_COMPRESSION_ZSTD and len(stored[0].payload) < len(doc)
    assert stored[1].compression == pb.PAYLOAD_COMPRESSION_NONE and stored[1].payload == b"x"  # not worth it
    got = [await consumer.receive(timeout_s=5) for _ in range(2)]
    assert [m.payload for m in got] == [doc, b"x"]


async def test_a_large_message_is_chunked_reassembled_and_acked_whole(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s", sub_type=SubType.EXCLUSIVE)
    producer = await client.create_producer(T)
    big = bytes(range(256)) * 50  # 12,800 bytes: 4 chunks of at most 4096
    before = await producer.send(b"before")
    big_id = await producer.send(big, properties={"kind": "big"}, key="k")
    await producer.send(b"after")
    log = cluster.topics[T].log
    assert [len(m.payload) for m in log] == [6, 4096, 4096, 4096, 512, 5]
    assert {m.chunk.message_uuid for m in log[1:5]} != {""} and [m.chunk.index for m in log[1:5]] == [
        0,
        1,
        2,
        3,
    ]
    assert all(m.routing_key == "k" for m in log[1:5])
    assert big_id.offset == before.offset + 1  # the id of the first chunk
    got = [await consumer.receive(timeout_s=5) for _ in range(3)]
    assert [m.payload for m in got] == [b"before", big, b"after"]
    assert got[1].properties == {"kind": "big"} and got[1].key == "k"
    assert got[1].chunk_offsets == (1, 2, 3, 4) and got[1].offset == 1
    for m in got:
        await consumer.ack(m)
    await consumer.flush_acks()
    assert sorted(o for b in cluster.ack_batches for o in b.topic_offsets) == [0, 1, 2, 3, 4, 5]


async def test_nack_of_a_chunked_message_redelivers_it_whole(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s", sub_type=SubType.EXCLUSIVE)
    producer = await client.create_producer(T, compression="lz4")
    big = json.dumps([{"id": i, "name": f"n{i}"} for i in range(2000)]).encode()
    await producer.send(big)
    assert len(cluster.topics[T].log) > 1  # still over the limit compressed: chunked
    first = await consumer.receive(timeout_s=5)
    assert first.payload == big and first.redelivery_count == 0
    await consumer.nack(first, delay_ms=0)
    assert sorted(n.msg_id.topic_offset for n in cluster.nacks) == list(first.chunk_offsets)
    again = await consumer.receive(timeout_s=5)
    assert again.payload == big and again.chunk_offsets == first.chunk_offsets
    assert again.redelivery_count == 1


async def test_chunking_off_refuses_what_is_over_the_limit(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    from danube_common.errors import MessageTooLarge

    producer = await client.create_producer(T, enable_chunking=False)
    with pytest.raises(MessageTooLarge):
        await producer.send(b"x" * (LIMIT + 1))


async def test_an_abandoned_chunked_message_is_dropped_counted_and_acked(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(
        T, subscription="s", sub_type=SubType.EXCLUSIVE, chunked_message_timeout_s=0.2
    )
    producer = await client.create_producer(T)
    # What a producer that died after its first chunks leaves behind.
    log = cluster.topics[T].log
    log += [chunk("orphan", i, 3, b"o" * 10, offset, total=30) for i, offset in enumerate((0, 1))]
    await producer.send(b"next")
    assert (await consumer.receive(timeout_s=5)).payload == b"next"
    await wait_until(lambda: consumer.chunked_dropped == 1, timeout_s=5, what="orphan dropped")
    await wait_until(
        lambda: {0, 1} <= {o for b in cluster.ack_batches for o in b.topic_offsets},
        timeout_s=5,
        what="orphan chunks acked",
    )
    with pytest.raises(ClientTimeout):  # never delivered
        await consumer.receive(timeout_s=0.3)


async def test_a_refused_chunk_fails_the_whole_message(client: DanubeClient, cluster: FakeCluster) -> None:
    from danube_common.errors import InvalidPayload

    producer = await client.create_producer(T)
    await producer.send(b"create")
    cluster.refuse_next.append(
        pb.ErrorDetail(code="INVALID_PAYLOAD", grpc_code=3, message="refused chunk", retryable=False)
    )
    with pytest.raises(InvalidPayload, match="refused chunk"):
        await producer.send(b"x" * (3 * LIMIT))
    assert producer.pending == 0
    assert (await producer.send(b"after")).offset == len(cluster.topics[T].log) - 1
