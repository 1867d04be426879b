"""Large and compressed messages on the consumer side, and splitting on the producer side.

A payload larger than the broker's ``max_message_size_bytes`` (after compression) is split by
the producer into chunks of at most that size (:func:`split`); each chunk is a message of its
own (own offset, own sequence id, the same routing key and properties) carrying
``StreamMessage.chunk`` = (message uuid, index, count, total size). The broker sees ordinary
messages and needs nothing special.

On the consumer, :class:`ChunkAssembler` (one per partition) holds chunks until every index of a
message arrived, then :func:`build_messages` hands one :class:`PackedMessage` to the receive
queue. Its ``payload`` joins and decompresses lazily; ``chunk_offsets`` lists every chunk's offset
so ``ack`` acknowledges, and ``nack`` redelivers, the whole message. A message whose chunks stop
arriving (the producer died mid-message, or the chunks were spread over several consumers of a
shared subscription) is dropped after ``chunked_message_timeout_s``, or when more than
``max_pending_chunked_messages`` are incomplete (oldest first): counted, never delivered, and
its chunks acknowledged so the broker does not redeliver them forever.

Pure: no I/O; the consumer drives it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from danube_common.compression import Compression, decompress
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.packs import PackTracker, unpack_into
from danube_sdk.types import Message

log = logging.getLogger(__name__)

_has_field = pb.StreamMessage.HasField

T = TypeVar("T")


def split(payload: bytes, max_chunk_bytes: int) -> list[bytes]:
    """``payload`` cut into pieces of at most ``max_chunk_bytes``, in order (at least one)."""
    if max_chunk_bytes < 1:
        raise ValueError(f"max_chunk_bytes must be >= 1, got {max_chunk_bytes}")
    if len(payload) <= max_chunk_bytes:
        return [payload]
    view = memoryview(payload)
    return [bytes(view[i : i + max_chunk_bytes]) for i in range(0, len(payload), max_chunk_bytes)]


class PackedMessage(Message[T]):
    """A received message that was compressed and/or chunked on the wire.

    ``payload`` is the original payload (the chunks joined, then decompressed, on first access;
    ``UnsupportedCompression`` for a codec this client does not know, ``CorruptData`` for bytes
    that do not decompress). The message id, offset, key and properties are those of its first
    chunk; ``chunk_offsets`` are the offsets of all its chunks (acks and nacks cover them all).
    """

    __slots__ = ("_chunks", "_plain")

    def __init__(
        self,
        raw: pb.StreamMessage,
        source: str,
        decode: Callable[[bytes], Any] | None,
        chunks: Sequence[pb.StreamMessage] = (),
    ) -> None:
        super().__init__(raw, source, decode)
        self._chunks = tuple(chunks)
        self._plain: bytes | None = None

    @property
    def payload(self) -> bytes:
        if self._plain is None:
            raw = self._raw
            data = b"".join(c.payload for c in self._chunks) if self._chunks else raw.payload
            self._plain = decompress(raw.compression, data)
        return self._plain

    def value(self) -> T:
        if self._decode is None:
            return cast(T, self.payload)
        return cast(T, self._decode(self.payload))

    @property
    def compression(self) -> int:
        """The codec the payload travelled with (a :class:`Compression` value, or an unknown int)."""
        return int(self._raw.compression)

    @property
    def chunk_offsets(self) -> tuple[int, ...]:
        return tuple(c.msg_id.topic_offset for c in self._chunks)

    @property
    def chunk_msg_ids(self) -> tuple[pb.MsgID, ...]:
        """The wire ids of the chunks (a nack names each); the message's own id if unchunked."""
        return tuple(c.msg_id for c in self._chunks) or (self._raw.msg_id,)

    def __repr__(self) -> str:
        size = self._raw.chunk.total_size if self._chunks else len(self._raw.payload)
        codec = self._raw.compression
        name = Compression(codec).name.lower() if codec in Compression._value2member_map_ else str(codec)
        return (
            f"PackedMessage(topic={self.topic!r}, offset={self.offset}, key={self.key!r}, "
            f"chunks={len(self._chunks)}, wire_bytes={size}, compression={name})"
        )


@dataclass(slots=True)
class _Partial:
    count: int
    total_size: int
    last_seen: float
    chunks: dict[int, pb.StreamMessage] = field(default_factory=dict)

    def offsets(self) -> list[int]:
        return [c.msg_id.topic_offset for c in self.chunks.values()]


class ChunkAssembler:
    """Incomplete chunked messages of one partition, by message uuid (oldest first)."""

    def __init__(self, *, timeout_s: float, max_pending: int, topic: str = "") -> None:
        self._timeout_s = timeout_s
        self._max_pending = max_pending
        self._topic = topic
        self._partial: dict[str, _Partial] = {}
        #: Incomplete messages dropped so far (timed out, evicted, or inconsistent chunks).
        self.dropped = 0
        self._to_ack: list[int] = []

    @property
    def pending(self) -> int:
        """Messages with some but not all chunks received."""
        return len(self._partial)

    def first_offsets(self) -> list[int]:
        """Offsets of the first chunks of the incomplete messages whose first chunk arrived."""
        return [p.chunks[0].msg_id.topic_offset for p in self._partial.values() if 0 in p.chunks]

    def add(self, m: pb.StreamMessage, now: float) -> tuple[pb.StreamMessage, ...] | None:
        """Take one chunk; return every chunk of its message in order once the last arrived."""
        info = m.chunk
        uuid = info.message_uuid
        p = self._partial.pop(uuid, None)  # re-inserted below: the dict stays oldest-first
        if p is None:
            p = _Partial(info.count, info.total_size, now)
        consistent = info.count == p.count and info.total_size == p.total_size
        if not uuid or info.count < 1 or info.index >= info.count or not consistent:
            why = f"inconsistent chunk {info.index}/{info.count} at offset {m.msg_id.topic_offset}"
            self._drop(uuid, p, why)
            self._to_ack.append(m.msg_id.topic_offset)
            return None
        p.chunks[info.index] = m  # a redelivered chunk replaces its earlier copy
        p.last_seen = now
        if len(p.chunks) < p.count:
            self._partial[uuid] = p
            if len(self._partial) > self._max_pending:
                oldest = next(iter(self._partial))
                self._drop(oldest, self._partial.pop(oldest), "too many incomplete chunked messages")
            return None
        chunks = tuple(p.chunks[i] for i in range(p.count))
        size = sum(len(c.payload) for c in chunks)
        if size != p.total_size:
            self._drop(uuid, p, f"chunks hold {size} bytes, the message has {p.total_size}")
            return None
        return chunks

    def expire(self, now: float) -> None:
        """Drop messages with no new chunk for ``timeout_s``."""
        deadline = now - self._timeout_s
        for uuid in [u for u, p in self._partial.items() if p.last_seen <= deadline]:
            self._drop(uuid, self._partial.pop(uuid), f"no chunk for {self._timeout_s:g} s")

    def touch(self, now: float) -> None:
        """Restart every incomplete message's timeout (while the partition reads nothing
        because the application has not taken what is buffered)."""
        for p in self._partial.values():
            p.last_seen = now

    def take_dropped(self) -> list[int]:
        """Offsets of the chunks of dropped messages, to acknowledge (then forgotten here)."""
        out, self._to_ack = self._to_ack, []
        return out

    def clear(self) -> None:
        """Forget every incomplete message without acknowledging it (after a seek: its chunks
        come again from the new position, or not at all)."""
        self._partial.clear()

    def _drop(self, uuid: str, p: _Partial, why: str) -> None:
        self.dropped += 1
        self._to_ack.extend(p.offsets())
        log.warning(
            "dropping chunked message %s on %s (%d of %d chunks received): %s",
            uuid or "<no uuid>",
            self._topic,
            len(p.chunks),
            p.count,
            why,
        )


def build_messages(
    raws: Sequence[pb.StreamMessage],
    topic: str,
    decode: Callable[[bytes], Any] | None,
    assembler: ChunkAssembler,
    now: float,
    packs: PackTracker | None = None,
) -> list[Message[Any]]:
    """The messages of one delivery frame: plain ones as they are, compressed ones wrapped,
    packs opened (``packs``: what was acknowledged of them; None for readers), chunks
    collected until their message is complete."""
    has = _has_field
    plain: list[Message[Any]] = [
        Message(m, topic, decode)
        for m in raws
        if not m.compression and not m.batch_size and not has(m, "chunk")
    ]
    if len(plain) == len(raws):  # the common case, in one comprehension
        return plain
    out: list[Message[Any]] = []
    for m in raws:
        if m.batch_size:
            unpack_into(out, m, topic, decode, packs)
        elif m.HasField("chunk"):
            chunks = assembler.add(m, now)
            if chunks is not None:
                out.append(PackedMessage(chunks[0], topic, decode, chunks))
        elif m.compression:
            out.append(PackedMessage(m, topic, decode))
        else:
            out.append(Message(m, topic, decode))
    return out
