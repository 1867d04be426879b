"""A reliable topic's uploaded history, for readers outside the broker: which objects hold it,
and the checked frames of one object.

The WAL uploader writes one object per uploaded range ``[start, next)`` of a topic and describes
it in etcd (``danube_common.storage``). Two ways to find a topic's objects:

- :func:`load_descriptors`: the descriptors in etcd (what the broker's ``RemoteHistory`` reads):
  authoritative, disjoint, with each object's size, crc32c and newest publish time;
- :func:`objects_from_listing`: the object store's own listing, parsed by key (no etcd needed).
  It may also show objects no descriptor names (an upload whose transaction never happened, the
  same offsets cut differently), so :func:`cover` picks, for every offset, one object holding it.

:func:`decode_object` turns an object's bytes into its frames with every check a reader makes:
size and whole-object crc32c when known, the segment header naming the first offset, each
frame's crc32c, consecutive offsets, nothing missing, nothing after the last frame. Damage
raises :class:`~danube_common.errors.CorruptData` naming the object and where: never a skip.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import google_crc32c

from danube_common.errors import CorruptData
from danube_common.keys import Keys
from danube_common.metadata.store import MetadataStore
from danube_common.objstore import ObjectInfo
from danube_common.storage import SegmentDescriptor, check_disjoint, parse_object_key_parts
from danube_common.topic_name import TopicName
from danube_common.wal.codec import Frame, scan
from danube_common.wal.segment import HEADER_BYTES, decode_header

log = logging.getLogger(__name__)

#: What a reader of a damaged object can do (appended to every CorruptData of this module).
DAMAGE_ADVICE = (
    "it is not skipped: re-upload the range from a broker disk that still holds it, or restore the "
    "object from a backup, or leave its offsets out of the read range"
)


@dataclass(frozen=True, slots=True)
class HistoryObject:
    """One uploaded object of a topic: offsets ``[start_offset, next_offset)``."""

    topic: str
    key: str
    start_offset: int
    next_offset: int
    size_bytes: int
    #: crc32c of the whole object (None: not known, e.g. found by listing).
    crc32c: int | None = None
    #: Newest publish time among its messages (0: not known).
    max_publish_time_ms: int = 0

    @classmethod
    def from_descriptor(cls, d: SegmentDescriptor) -> HistoryObject:
        return cls(
            topic=d.topic,
            key=d.object_key,
            start_offset=d.start_offset,
            next_offset=d.next_offset,
            size_bytes=d.size_bytes,
            crc32c=d.crc32c,
            max_publish_time_ms=d.max_publish_time_ms,
        )


@dataclass(frozen=True, slots=True)
class Piece:
    """The offsets ``[lo, hi)`` of ``obj`` a reader takes from it."""

    obj: HistoryObject
    lo: int
    hi: int


async def load_descriptors(meta: MetadataStore, keys: Keys, topic: TopicName) -> list[SegmentDescriptor]:
    """A topic's segment descriptors, sorted by start offset. An unreadable descriptor is logged
    and left out; overlapping ones raise CorruptData (two histories of one topic)."""
    kvs, _ = await meta.get_prefix(keys.segments_prefix(topic))
    found: list[SegmentDescriptor] = []
    for kv in kvs:
        try:
            found.append(SegmentDescriptor.from_json(kv.json()))
        except (TypeError, ValueError, KeyError) as exc:
            log.error("topic %s: unreadable segment descriptor %s (%s); ignored", topic, kv.key, exc)
    try:
        return check_disjoint(found)
    except ValueError as exc:
        raise CorruptData(f"topic {topic}: {exc}") from exc


def objects_from_listing(
    infos: Iterable[ObjectInfo], topic: TopicName, *, incarnation: int | None = None
) -> list[HistoryObject]:
    """The objects of ``topic`` among listed ones (other keys are ignored), sorted by start.

    Objects of one incarnation only: ``incarnation``, or the newest one found (a deleted topic's
    objects are deleted with it, but a failed delete can leave some). Keys written before
    incarnations were recorded belong to every incarnation."""
    parsed = []
    for info in infos:
        parts = parse_object_key_parts(info.key)
        if parts is not None and parts.topic == topic:
            parsed.append((parts, info))
    if incarnation is None:
        incarnation = max((p.incarnation or 0 for p, _ in parsed), default=0)
    out = [
        HistoryObject(
            topic=str(topic),
            key=info.key,
            start_offset=p.start_offset,
            next_offset=p.next_offset,
            size_bytes=info.size,
        )
        for p, info in parsed
        if p.incarnation is None or p.incarnation == incarnation
    ]
    return sorted(out, key=lambda o: (o.start_offset, -o.next_offset, o.key))


def cover(
    objects: Sequence[HistoryObject], *, start_offset: int = 0, end_offset: int | None = None
) -> tuple[list[Piece], list[tuple[int, int]]]:
    """Pieces reading every offset in ``[start_offset, end_offset)`` that some object holds,
    each exactly once and in order, and the ranges no object holds (holes).

    For each next offset the object holding it that reaches furthest is taken (disjoint
    descriptors: each in turn). ``end_offset`` None: up to the end of the last object."""
    objs = sorted(objects, key=lambda o: (o.start_offset, -o.next_offset, o.key))
    end = end_offset if end_offset is not None else max((o.next_offset for o in objs), default=0)
    pieces: list[Piece] = []
    holes: list[tuple[int, int]] = []
    best: HistoryObject | None = None  # of the objects starting at or before ``at``: the furthest reaching
    at = start_offset
    i = 0
    while at < end:
        while i < len(objs) and objs[i].start_offset <= at:
            if best is None or objs[i].next_offset > best.next_offset:
                best = objs[i]
            i += 1
        if best is not None and best.next_offset > at:
            hi = min(best.next_offset, end)
            pieces.append(Piece(best, at, hi))
            at = hi
        elif i == len(objs):
            holes.append((at, end))
            break
        else:
            nxt = min(objs[i].start_offset, end)
            holes.append((at, nxt))
            at = nxt
    return pieces, holes


def decode_object(data: bytes, obj: HistoryObject) -> list[Frame]:
    """Every frame of ``obj`` (offsets ``start_offset .. next_offset - 1``), each checked.
    CorruptData naming the object, the offset and the byte where it is damaged."""
    where = f"object {obj.key} of topic {obj.topic}"
    if obj.size_bytes and len(data) != obj.size_bytes:
        raise CorruptData(
            f"{where} is {len(data)} bytes, but it should be {obj.size_bytes} (truncated or replaced); "
            + DAMAGE_ADVICE
        )
    try:
        header = decode_header(data[:HEADER_BYTES], source=where)
    except CorruptData as exc:
        raise CorruptData(f"{exc.message}; {DAMAGE_ADVICE}") from exc
    if header.first_offset != obj.start_offset:
        raise CorruptData(
            f"{where} starts at offset {header.first_offset}, its key says {obj.start_offset}; "
            + DAMAGE_ADVICE
        )
    want = obj.next_offset - obj.start_offset
    res = scan(data, HEADER_BYTES, expected_offset=obj.start_offset, max_frames=want)
    if len(res.frames) < want:
        at = obj.start_offset + len(res.frames)
        why = res.detail or "it ends there"
        raise CorruptData(
            f"{where} is damaged at byte {res.end} (offset {at} of {obj.start_offset}..{obj.next_offset - 1}): "
            f"{why}; " + DAMAGE_ADVICE
        )
    if res.end != len(data):
        raise CorruptData(
            f"{where} has {len(data) - res.end} unexpected bytes after its last offset {obj.next_offset - 1}; "
            + DAMAGE_ADVICE
        )
    if obj.crc32c is not None and google_crc32c.value(data) != obj.crc32c:
        raise CorruptData(f"{where} does not match the crc32c its descriptor records; " + DAMAGE_ADVICE)
    return res.frames
