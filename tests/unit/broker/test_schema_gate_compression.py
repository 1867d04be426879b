"""Payload validation of compressed and chunked messages: compressed payloads are validated
decompressed (and stored as sent); chunks cannot be validated and are refused under enforce."""

from __future__ import annotations

import json

import pytest

from danube_common.compression import Compression, compress
from danube_common.errors import InvalidPayload
from danube_common.packing import pack
from danube_common.pb import DanubeApi_pb2 as pb
from tests.unit.broker.test_schema_gate import Env, env, msg, ref

pytestmark = pytest.mark.unit

__all__ = ["env"]  # the fixture, shared with test_schema_gate


def packed(payload: bytes, codec: Compression) -> pb.StreamMessage:
    m = msg(compress(codec, payload))
    m.compression = int(codec)  # type: ignore[assignment]
    return m


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
async def test_compressed_payloads_are_validated_decompressed_and_kept_compressed(
    env: Env, codec: Compression
) -> None:
    topic = await env.topic(f"/default/packed-{codec.name.lower()}")
    await env.configure(topic, "people", "enforce")
    producer = await env.gate.bind_producer(topic, ref("people"))
    good = json.dumps({"name": "ann", "age": 3, "pad": "x" * 200}).encode()
    batch = [packed(good, codec)]
    wire = batch[0].payload
    env.gate.check_batch(topic, producer, batch)
    assert batch[0].payload == wire  # nothing rewritten
    with pytest.raises(InvalidPayload, match="message 1 of the batch does not match"):
        env.gate.check_batch(
            topic, producer, [packed(good, codec), packed(json.dumps({"age": 1}).encode(), codec)]
        )


async def test_undecodable_or_unknown_codecs_are_refused_with_the_reason(env: Env) -> None:
    topic = await env.topic("/default/packed-bad")
    await env.configure(topic, "people", "enforce")
    producer = await env.gate.bind_producer(topic, ref("people"))
    broken = msg(b"not zstd")
    broken.compression = pb.PAYLOAD_COMPRESSION_ZSTD
    with pytest.raises(InvalidPayload, match=r"cannot be validated.*zstd payload"):
        env.gate.check_batch(topic, producer, [broken])
    unknown = msg(b"{}")
    unknown.compression = 9  # type: ignore[assignment]
    with pytest.raises(InvalidPayload, match="codec 9"):
        env.gate.check_batch(topic, producer, [unknown])


async def test_chunks_are_refused_on_validated_topics_and_pass_elsewhere(env: Env) -> None:
    topic = await env.topic("/default/chunks")
    await env.configure(topic, "people", "enforce")
    producer = await env.gate.bind_producer(topic, ref("people"))
    part = msg(b'{"name": "a')
    part.chunk.message_uuid, part.chunk.index, part.chunk.count, part.chunk.total_size = "u", 0, 2, 20
    with pytest.raises(InvalidPayload, match="chunk 1 of 2 of a message larger than"):
        env.gate.check_batch(topic, producer, [part])
    loose = await env.topic("/default/chunks-unchecked")
    await env.configure(loose, "people", "enforce", payloads=False)
    env.gate.check_batch(loose, producer, [part])  # schema ids only: chunks are fine


async def test_every_message_of_a_pack_is_validated(env: Env) -> None:
    topic = await env.topic("/default/packs")
    await env.configure(topic, "people", "enforce")
    producer = await env.gate.bind_producer(topic, ref("people"))

    def pack_of(*docs: dict[str, object]) -> pb.StreamMessage:
        m = msg(
            compress(Compression.ZSTD, pack([pb.StreamMessage(payload=json.dumps(d).encode()) for d in docs]))
        )
        m.compression = pb.PAYLOAD_COMPRESSION_ZSTD
        m.batch_size = len(docs)
        return m

    good = pack_of({"name": "ann"}, {"name": "bob"}, {"name": "cy"})
    wire = good.payload
    env.gate.check_batch(topic, producer, [good])
    assert good.payload == wire  # stored as sent
    with pytest.raises(InvalidPayload, match="message 1 of the batch does not match"):
        env.gate.check_batch(topic, producer, [good, pack_of({"name": "dee"}, {"age": 4})])
    broken = pack_of({"name": "eve"}, {"name": "fay"})
    broken.batch_size = 3
    with pytest.raises(InvalidPayload, match="holds 2 messages, its header says 3"):
        env.gate.check_batch(topic, producer, [broken])
