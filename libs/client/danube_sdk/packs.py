"""Compression per batch: packing on the producer, unpacking and acknowledging on the consumer.

Producer: a compressing producer leaves payloads as they are while a batch fills; when the batch
is sealed (:func:`compress_batch`) every run of consecutive messages with the same routing key
(no chunk, no due time) becomes one *pack* (``StreamMessage.batch_size``; format in
:mod:`danube_common.packing`) compressed as a whole, and every other message is compressed
alone. A pack that does not get smaller is sent as the messages it was made of, uncompressed.

Consumer: a pack arrives as one message (one offset). :func:`unpack_into` turns it into
:class:`PackedEntryMessage` s, one per message, sharing a :class:`Pack` that records which of
them were acknowledged. The pack's offset is acknowledged once all of them are; a nack (or an
ack timeout) redelivers the whole pack, and the messages already acknowledged are skipped on
redelivery while this consumer lives (:class:`PackTracker`). A consumer that restarts gets
the pack's unacknowledged messages *and* the ones it had acknowledged again: at-least-once, as
for any message whose ack had not reached the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from danube_common.compression import Compression, compress, compress_if_smaller
from danube_common.errors import DanubeError
from danube_common.packing import entry_bytes, pack, unpack
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.types import Message, MessageId

log = logging.getLogger(__name__)

T = TypeVar("T")


# ---------------------------------------------------------------------- producer


def compress_batch(
    msgs: Any, codec: Compression, *, pack_runs: bool, max_pack_bytes: int
) -> list[int] | None:
    """Compress the sealed batch ``msgs`` (a repeated ``StreamMessage`` field, rewritten in
    place): messages whose payload was left uncompressed (no codec set, not a chunk) are packed
    by runs of the same routing key (``pack_runs``; a pack's uncompressed size stays within
    ``max_pack_bytes``) or compressed alone. Returns how many sent messages each wire message
    carries, or None when every wire message is one sent message."""
    n = len(msgs)
    if not pack_runs or n < 2:
        for m in msgs:
            if _deferred(m):
                _compress_alone(m, codec)
        return None
    out: list[pb.StreamMessage] = []
    groups: list[int] = []
    packed = False
    i = 0
    while i < n:
        m = msgs[i]
        if not _deferred(m) or m.deliver_at_ms:
            if _deferred(m):
                _compress_alone(m, codec)
            out.append(m)
            groups.append(1)
            i += 1
            continue
        key = m.routing_key if m.HasField("routing_key") else None
        size = entry_bytes(m)
        j = i + 1
        while j < n:
            nxt = msgs[j]
            if not _deferred(nxt) or nxt.deliver_at_ms:
                break
            if (nxt.routing_key if nxt.HasField("routing_key") else None) != key:
                break
            size += entry_bytes(nxt)
            if size > max_pack_bytes:
                break
            j += 1
        run = msgs[i:j]
        made = _pack_run(run, codec) if len(run) > 1 else None
        if made is None:
            for r in run:
                _compress_alone(r, codec)
            out.extend(run)
            groups.extend([1] * len(run))
        else:
            out.append(made)
            groups.append(len(run))
            packed = True
        i = j
    if not packed:
        return None
    del msgs[:]
    msgs.extend(out)
    return groups


def _deferred(m: pb.StreamMessage) -> bool:
    return not m.compression and not m.HasField("chunk")


def _compress_alone(m: pb.StreamMessage, codec: Compression) -> None:
    used, data = compress_if_smaller(codec, m.payload)
    if used:
        m.payload = data
        m.compression = cast("pb.PayloadCompression", int(used))


def _pack_run(run: Sequence[pb.StreamMessage], codec: Compression) -> pb.StreamMessage | None:
    """One pack of ``run`` (its header from the first message, its sequence id the last
    one's), or None when compressing the pack does not make it smaller."""
    raw = pack(run)
    data = compress(codec, raw)
    if len(data) >= sum(len(m.payload) for m in run):
        return None
    first, last = run[0], run[-1]
    out = pb.StreamMessage()
    out.CopyFrom(first)
    out.ClearField("attributes")
    out.payload = data
    out.compression = cast("pb.PayloadCompression", int(codec))
    out.batch_size = len(run)
    out.sequence_id = last.sequence_id
    return out


# ---------------------------------------------------------------------- consumer


class Pack:
    """The acknowledgement state of one delivered pack."""

    __slots__ = ("_owner", "acked", "offset", "size")

    def __init__(self, offset: int, size: int, owner: dict[int, Pack] | None) -> None:
        self.offset = offset
        self.size = size
        self.acked: set[int] = set()
        self._owner = owner

    def ack(self, index: int) -> bool:
        """Record the ack of message ``index``; True once every message of the pack is acked
        (the pack's offset is then to be acknowledged, once)."""
        if len(self.acked) >= self.size:
            return False
        self.acked.add(index)
        if len(self.acked) < self.size:
            return False
        if self._owner is not None:
            self._owner.pop(self.offset, None)
        return True

    def ack_up_to(self, index: int) -> bool:
        """Record the acks of messages 0 .. ``index`` (a cumulative ack); True once complete."""
        done = False
        for i in range(index + 1):
            done = self.ack(i) or done
        return done


class PackTracker:
    """The packs of one partition delivered and not fully acknowledged yet, by offset: a
    redelivered pack skips the messages already acknowledged. Readers (which never ack) keep
    none."""

    def __init__(self) -> None:
        self._packs: dict[int, Pack] = {}

    def __len__(self) -> int:
        return len(self._packs)

    def get(self, offset: int, size: int) -> Pack:
        p = self._packs.get(offset)
        if p is None or p.size != size:
            p = self._packs[offset] = Pack(offset, size, self._packs)
        return p

    def clear(self) -> None:
        self._packs.clear()

    def forget_up_to(self, offset: int) -> None:
        """A cumulative ack covered every pack up to ``offset``: their states are moot."""
        for o in [o for o in self._packs if o <= offset]:
            del self._packs[o]


class PackedEntryMessage(Message[T]):
    """One message of a pack. Its ``offset`` is the pack's (shared by the pack's messages);
    ``batch_index`` tells them apart, and ``message_id`` carries both. Of a pack that cannot
    be opened (unknown codec, corrupt bytes) every message raises that error from ``payload``
    and ``value()`` (and has no properties): the application sees it and acks or nacks."""

    __slots__ = ("_entry", "_error", "_index", "_pack")

    def __init__(
        self,
        raw: pb.StreamMessage,
        source: str,
        decode: Callable[[bytes], Any] | None,
        entry: pb.PackedEntry | None,
        index: int,
        pack_state: Pack,
        error: DanubeError | None = None,
    ) -> None:
        super().__init__(raw, source, decode)
        self._entry = entry
        self._index = index
        self._pack = pack_state
        self._error = error

    @property
    def payload(self) -> bytes:
        if self._entry is None:
            assert self._error is not None
            raise self._error
        return self._entry.payload

    def value(self) -> T:
        if self._decode is None:
            return cast(T, self.payload)
        return cast(T, self._decode(self.payload))

    @property
    def properties(self) -> dict[str, str]:
        if self._props is None:
            self._props = dict(self._entry.attributes) if self._entry is not None else {}
        return self._props

    @property
    def publish_time_ms(self) -> int:
        return self._entry.publish_time if self._entry is not None else self._raw.publish_time

    @property
    def batch_index(self) -> int | None:
        return self._index

    @property
    def batch_size(self) -> int:
        return self._pack.size

    def settle_in_pack(self, *, cumulative: bool = False) -> bool:
        """Record this message's ack (``cumulative``: and the earlier ones of its pack); True
        when that completes the pack, whose offset is then to be acknowledged."""
        if cumulative:
            return self._pack.ack_up_to(self._index)
        return self._pack.ack(self._index)

    @property
    def message_id(self) -> MessageId:
        mid = self._raw.msg_id
        return MessageId(self._source, mid.topic_offset, mid.producer_id, self._index)

    def __repr__(self) -> str:
        if self._entry is None:
            shown = f"error={self._error}"
        else:
            data = self._entry.payload
            shown = f"payload={data[:32]!r}{'...' if len(data) > 32 else ''}"
        return (
            f"PackedEntryMessage(topic={self.topic!r}, offset={self.offset}, batch_index={self._index}, "
            f"key={self.key!r}, {shown})"
        )


def unpack_into(
    out: list[Message[Any]],
    m: pb.StreamMessage,
    topic: str,
    decode: Callable[[bytes], Any] | None,
    tracker: PackTracker | None,
) -> None:
    """Append the messages of the pack ``m`` to ``out``, skipping those already acknowledged
    (``tracker``: None for readers)."""
    offset = m.msg_id.topic_offset
    state = tracker.get(offset, m.batch_size) if tracker is not None else Pack(offset, m.batch_size, None)
    acked = state.acked
    try:
        entries: Sequence[pb.PackedEntry | None] = unpack(m)
        error = None
    except DanubeError as exc:
        log.warning("cannot unpack the message at offset %d of %s: %s", offset, topic, exc)
        entries, error = [None] * m.batch_size, exc
    for i, e in enumerate(entries):
        if i not in acked:
            out.append(PackedEntryMessage(m, topic, decode, e, i, state, error))
