"""Packs: many messages of one producer in one compressed record (pure; no I/O).

A producer that compresses packs the messages of a publish batch that share a routing key into
one ``StreamMessage`` whose ``payload`` is a compressed ``PackedMessages`` and whose
``batch_size`` says how many messages it holds. Compressing a hundred similar messages together
finds far more redundancy than compressing each alone (docs/benchmarks.md, "Compression"). The
broker never opens a pack (except to validate payloads on schema-validated topics): it is one
message with one offset in the log, dispatched, acknowledged and redelivered whole. Consumers
unpack it (see the SDK's ``danube_sdk.packs``), and the history reader does the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import DecodeError

from danube_common.compression import MAX_DECOMPRESSED_BYTES, decompress
from danube_common.errors import CorruptData
from danube_common.pb import DanubeApi_pb2 as pb

#: Bytes of framing a packed entry adds to its payload and attributes (tags, lengths, the
#: timestamp), at most: used to keep a pack within the broker's message size limit.
ENTRY_OVERHEAD_BYTES = 24


def entry_bytes(m: pb.StreamMessage) -> int:
    """What ``m`` adds to a pack before compression (an upper bound)."""
    size = len(m.payload) + ENTRY_OVERHEAD_BYTES
    for k, v in m.attributes.items():
        size += len(k) + len(v) + 8
    return size


def pack(msgs: Sequence[pb.StreamMessage]) -> bytes:
    """The uncompressed ``PackedMessages`` of ``msgs`` (payload, attributes, publish time)."""
    out = pb.PackedMessages()
    entries = out.entries
    for m in msgs:
        e = entries.add(payload=m.payload, publish_time=m.publish_time)
        if m.attributes:
            e.attributes.update(m.attributes)
    return out.SerializeToString()


def unpack(m: pb.StreamMessage, *, max_bytes: int = MAX_DECOMPRESSED_BYTES) -> Sequence[pb.PackedEntry]:
    """The messages of the pack ``m`` (``m.batch_size`` >= 2), in order. Raises
    UnsupportedCompression for an unknown codec and CorruptData for a pack that does not
    decompress, does not parse, or does not hold ``batch_size`` messages."""
    data = decompress(m.compression, m.payload, max_bytes=max_bytes)
    packed = pb.PackedMessages()
    try:
        packed.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptData(f"packed message at offset {m.msg_id.topic_offset} does not parse: {exc}") from exc
    entries = packed.entries
    if len(entries) != m.batch_size:
        raise CorruptData(
            f"packed message at offset {m.msg_id.topic_offset} holds {len(entries)} messages, "
            f"its header says {m.batch_size}"
        )
    return entries


def message_count(msgs: Sequence[pb.StreamMessage]) -> int:
    """How many messages ``msgs`` carry, a pack counting as its ``batch_size``."""
    return sum(m.batch_size or 1 for m in msgs)
