"""Compression per batch (packs): how a sealed batch is packed (pure), the pack format, and the
producer/consumer pair against the fake broker (one record per pack, ids with batch indexes,
the pack's offset acknowledged once all its messages are, redelivery skipping what was acked)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danube_common.compression import Compression, compress, decompress
from danube_common.errors import CorruptData, UnsupportedCompression
from danube_common.packing import message_count, pack, unpack
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import DanubeClient, SubType
from danube_sdk.packs import PackedEntryMessage, PackTracker, compress_batch, unpack_into
from danube_sdk.types import MessageId
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/packed"


def doc(i: int) -> bytes:
    return json.dumps({"order": i, "customer": "c-42", "items": [{"sku": "pen", "qty": 1}] * 5}).encode()


def frame(specs: list[tuple[bytes, str | None]]) -> pb.PublishBatch:
    b = pb.PublishBatch()
    for n, (payload, key) in enumerate(specs):
        m = b.messages.add(payload=payload, publish_time=1000 + n, sequence_id=n + 1)
        m.attributes["n"] = str(n)
        if key is not None:
            m.routing_key = key
    return b


# ---------------------------------------------------------------- packing (pure)


def test_runs_of_one_key_become_packs_and_the_rest_is_compressed_alone() -> None:
    b = frame([(doc(0), None), (doc(1), None), (doc(2), "k"), (doc(3), "k"), (doc(4), "k"), (doc(5), None)])
    groups = compress_batch(b.messages, Compression.ZSTD, pack_runs=True, max_pack_bytes=1 << 20)
    assert groups == [2, 3, 1]
    first, second, alone = b.messages
    assert (first.batch_size, second.batch_size, alone.batch_size) == (2, 3, 0)
    assert second.routing_key == "k" and not first.HasField("routing_key")
    assert [first.sequence_id, second.sequence_id, alone.sequence_id] == [2, 5, 6]  # the last one's
    assert not first.attributes  # per message, inside the pack
    entries = unpack(second)
    assert [e.payload for e in entries] == [doc(2), doc(3), doc(4)]
    assert [dict(e.attributes) for e in entries] == [{"n": "2"}, {"n": "3"}, {"n": "4"}]
    assert [e.publish_time for e in entries] == [1002, 1003, 1004]
    assert alone.compression == pb.PAYLOAD_COMPRESSION_ZSTD and decompress(
        alone.compression, alone.payload
    ) == doc(5)
    assert message_count(list(b.messages)) == 6


def test_chunks_and_delayed_messages_are_never_packed() -> None:
    b = frame([(doc(0), None), (doc(1), None), (doc(2), None), (doc(3), None)])
    b.messages[1].deliver_at_ms = 99
    b.messages[3].chunk.message_uuid, b.messages[3].chunk.count = "u", 2
    groups = compress_batch(b.messages, Compression.LZ4, pack_runs=True, max_pack_bytes=1 << 20)
    assert groups is None  # no run of two: nothing packed
    assert [m.batch_size for m in b.messages] == [0, 0, 0, 0]
    assert b.messages[1].compression == pb.PAYLOAD_COMPRESSION_LZ4  # compressed alone
    assert b.messages[3].payload == doc(3) and not b.messages[3].compression  # a chunk: as it was


def test_a_pack_stays_within_the_size_limit() -> None:
    b = frame([(doc(i), None) for i in range(10)])
    one = len(doc(0)) + 40
    groups = compress_batch(b.messages, Compression.ZSTD, pack_runs=True, max_pack_bytes=3 * one)
    assert groups == [3, 3, 3, 1]


def test_incompressible_runs_travel_as_they_were() -> None:
    import os

    b = frame([(os.urandom(200), None) for _ in range(5)])
    before = [m.payload for m in b.messages]
    assert compress_batch(b.messages, Compression.ZSTD, pack_runs=True, max_pack_bytes=1 << 20) is None
    assert [m.payload for m in b.messages] == before and not any(m.compression for m in b.messages)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=300), st.sampled_from([None, "a", "b"])), max_size=30))
def test_packing_keeps_every_message_in_order(specs: list[tuple[bytes, str | None]]) -> None:
    b = frame([(p * 3, k) for p, k in specs])  # repeated: often compressible
    groups = compress_batch(b.messages, Compression.ZSTD, pack_runs=True, max_pack_bytes=2000)
    out: list[tuple[bytes, str | None]] = []
    for m in b.messages:
        key = m.routing_key if m.HasField("routing_key") else None
        if m.batch_size:
            out += [(e.payload, key) for e in unpack(m)]
        else:
            out.append((decompress(m.compression, m.payload), key))
    assert out == [(p * 3, k) for p, k in specs]
    assert sum(groups or [1] * len(b.messages)) == len(specs)


def test_a_corrupt_pack_is_refused_clearly() -> None:
    m = pb.StreamMessage(payload=compress(Compression.ZSTD, b"\xff\xff\xff"), compression=2, batch_size=2)
    with pytest.raises(CorruptData, match="does not parse"):
        unpack(m)
    good = pb.StreamMessage(
        payload=compress(Compression.ZSTD, pack([pb.StreamMessage(payload=b"x")] * 3)),
        compression=2,
        batch_size=2,
    )
    with pytest.raises(CorruptData, match="holds 3 messages, its header says 2"):
        unpack(good)


def test_an_unreadable_pack_reaches_the_application_as_errors_it_can_ack() -> None:
    m = pb.StreamMessage(payload=b"??", compression=9, batch_size=2, msg_id=pb.MsgID(topic_offset=7))
    out: list = []
    unpack_into(out, m, T, None, PackTracker())
    assert len(out) == 2 and [x.batch_index for x in out] == [0, 1]
    with pytest.raises(UnsupportedCompression):
        _ = out[0].payload
    assert out[0].properties == {} and out[1].message_id == MessageId(T, 7, 0, 1)


def test_the_tracker_skips_acked_messages_and_completes_once() -> None:
    raw = compress_batch_one(["a", "b", "c"])
    tracker = PackTracker()
    first: list = []
    unpack_into(first, raw, T, None, tracker)
    assert [m.payload for m in first] == [b"a" * 50, b"b" * 50, b"c" * 50]
    assert not first[1].settle_in_pack()
    again: list = []
    unpack_into(again, raw, T, None, tracker)  # redelivered: the acked one is skipped
    assert [m.batch_index for m in again] == [0, 2]
    assert not first[0].settle_in_pack() and not again[0].settle_in_pack()  # a second ack of 0
    assert again[1].settle_in_pack()  # the last one: ack the offset
    assert len(tracker) == 0 and not first[2].settle_in_pack()


def compress_batch_one(letters: list[str]) -> pb.StreamMessage:
    b = frame([(ch.encode() * 50, None) for ch in letters])
    compress_batch(b.messages, Compression.LZ4, pack_runs=True, max_pack_bytes=1 << 20)
    (m,) = b.messages
    m.msg_id.topic_offset = 3
    return m


# ---------------------------------------------------------------- against the fake broker


async def test_a_batch_travels_as_one_record_and_arrives_as_its_messages(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s", sub_type=SubType.EXCLUSIVE)
    producer = await client.create_producer(T, compression="zstd", batching_max_publish_delay_ms=50)
    payloads = [doc(i) for i in range(20)]
    ids = await producer.send_many(payloads, properties={"src": "test"})
    log = cluster.topics[T].log
    assert message_count(log) == 20 and len(log) < 20  # packed
    assert sum(len(m.payload) for m in log) * 3 < sum(map(len, payloads))
    assert all(i.batch_index is not None for i in ids if log[i.offset].batch_size)
    got = [await consumer.receive(timeout_s=5) for _ in range(20)]
    assert [m.payload for m in got] == payloads
    assert [m.message_id for m in got] == ids  # the ids the producer was given
    assert all(m.properties == {"src": "test"} for m in got)
    assert all(isinstance(m, PackedEntryMessage) for m in got if m.batch_index is not None)
    for m in got:
        await consumer.ack(m)
    await consumer.flush_acks()
    acked = sorted(o for b in cluster.ack_batches for o in b.topic_offsets)
    assert acked == list(range(len(log)))  # each pack's offset once


async def test_a_pack_is_acked_only_when_all_its_messages_are_and_redelivery_skips_acked_ones(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s", sub_type=SubType.SHARED)
    producer = await client.create_producer(T, compression="lz4", batching_max_messages=4)
    producer_batch = [doc(i) for i in range(4)]
    await producer.send_many(producer_batch)
    assert [m.batch_size for m in cluster.topics[T].log] == [4]
    got = [await consumer.receive(timeout_s=5) for _ in range(4)]
    await consumer.ack(got[0])
    await consumer.ack(got[2])
    await consumer.flush_acks()
    assert not cluster.ack_batches  # the pack is not complete
    await consumer.nack(got[1], delay_ms=0)
    again = [await consumer.receive(timeout_s=5) for _ in range(2)]
    assert [m.batch_index for m in again] == [1, 3] and all(m.redelivery_count == 1 for m in again)
    for m in again:
        await consumer.ack(m)
    await consumer.flush_acks()
    assert [list(b.topic_offsets) for b in cluster.ack_batches] == [[0]]


async def test_cumulative_ack_inside_a_pack_acks_up_to_the_previous_record(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s", sub_type=SubType.EXCLUSIVE)
    producer = await client.create_producer(T, compression="zstd", batching_max_messages=3)
    await producer.send_many([doc(i) for i in range(6)])
    assert [m.batch_size for m in cluster.topics[T].log] == [3, 3]
    got = [await consumer.receive(timeout_s=5) for _ in range(6)]
    await consumer.ack(got[0])  # the first pack partly acked: its state is kept ...
    packs = consumer._parts[T].packs
    assert len(packs) == 2
    await consumer.ack_cumulative(got[4])  # the second pack is not complete: up to offset 0
    assert [(list(b.topic_offsets), b.cumulative) for b in cluster.ack_batches] == [([0], True)]
    assert len(packs) == 1  # ... until a cumulative ack covers it
    await consumer.ack_cumulative(got[5])
    assert [list(b.topic_offsets) for b in cluster.ack_batches] == [[0], [1]]
    assert len(packs) == 0


async def test_messages_with_their_own_ids_are_never_packed(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    producer = await client.create_producer(T, compression="zstd", producer_name="ids")
    for n in range(1, 6):
        await producer.send_async(doc(n), sequence_id=n)
    await producer.flush()
    log = cluster.topics[T].log
    assert [m.sequence_id for m in log] == [1, 2, 3, 4, 5] and not any(m.batch_size for m in log)


async def test_without_pack_batches_each_message_is_compressed_alone(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    producer = await client.create_producer(T, compression="zstd", pack_batches=False)
    await producer.send_many([doc(i) for i in range(5)])
    log = cluster.topics[T].log
    assert len(log) == 5 and all(
        m.compression == pb.PAYLOAD_COMPRESSION_ZSTD and not m.batch_size for m in log
    )
