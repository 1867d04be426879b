"""Reliable topics' history in object storage: segment descriptors and object keys. Pure values.

A reliable topic's WAL segments (``danube_common.wal.segment``) are copied to object storage by
the WAL uploader (services/wal_uploader); each copy is described in etcd by a **descriptor** at
``/{cluster}/storage/{ns}/{topic}/segments/{start_offset:020d}`` (``Keys.segment``), written only
if absent. Descriptors of one topic never overlap: ``[start_offset, next_offset)`` ranges are
disjoint, and the union of a topic's descriptors, followed by the owner's local log, is the
topic's whole history with no gap.

Object keys are deterministic, so re-uploading after a crash overwrites the same object with the
same bytes::

    {ns}/{topic}/i{incarnation}/{start_offset:020d}-{next_offset:020d}.r{revision}.wal

(under the store's own prefix). The incarnation keeps a deleted topic's objects apart from a new
topic of the same name; the revision is the log record's (``danube_common.log_state``) when the
range was uploaded, so two writers can never put different bytes under one key (a woken former
owner's uploader cannot overwrite the new owner's object). Keys without them (``{ns}/{topic}/
{start}-{next}.wal``) are still read.

An object is a segment file as written by the broker (the 32-byte header, then frames), cut at
``next_offset``: any reader of WAL segments reads it.

The uploader's progress per topic (``Keys.upload_checkpoint``): ``{"next_offset": N}`` = every
offset below N is in object storage under a descriptor (set to the start of a log's first stint
when the broker opens it, then moved by the uploaders). The broker trims local segments only
below it (retention), and a new owner of the topic continues at
``max(recorded hand-over offset, last descriptor's next_offset)``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from danube_common.topic_name import TopicName

_OBJECT_RE = re.compile(
    r"^(?P<ns>[^/]+)/(?P<topic>[^/]+)/(?:i(?P<inc>\d+)/)?(?P<start>\d{20})-(?P<next>\d{20})(?:\.r(?P<rev>\d+))?\.wal$"
)


def object_key(
    topic: TopicName,
    start_offset: int,
    next_offset: int,
    *,
    incarnation: int | None = None,
    revision: int = 0,
) -> str:
    """The object key of a topic's history ``[start_offset, next_offset)``."""
    if not 0 <= start_offset < next_offset:
        raise ValueError(f"an object holds at least one offset: got [{start_offset}, {next_offset})")
    where = f"{topic.namespace}/{topic.local}/" + (f"i{incarnation}/" if incarnation else "")
    return f"{where}{start_offset:020d}-{next_offset:020d}" + (f".r{revision}" if revision else "") + ".wal"


def incarnation_prefix(topic: TopicName, incarnation: int) -> str:
    """Every object of one incarnation of a topic (deleted with the topic)."""
    return f"{topic.namespace}/{topic.local}/i{incarnation}/"


def parse_object_key(key: str) -> tuple[TopicName, int, int] | None:
    """``object_key``'s inverse (None for any other key)."""
    m = _OBJECT_RE.match(key)
    if m is None:
        return None
    return TopicName(m["ns"], m["topic"]), int(m["start"]), int(m["next"])


@dataclass(frozen=True, slots=True)
class ObjectKeyParts:
    """Everything an object key says: ``object_key``'s full inverse."""

    topic: TopicName
    start_offset: int
    next_offset: int
    #: None: a key from before incarnations were recorded.
    incarnation: int | None
    #: 0: a key without a revision.
    revision: int


def parse_object_key_parts(key: str) -> ObjectKeyParts | None:
    """Topic, offsets, incarnation and revision of an object key (None for any other key)."""
    m = _OBJECT_RE.match(key)
    if m is None:
        return None
    return ObjectKeyParts(
        TopicName(m["ns"], m["topic"]),
        int(m["start"]),
        int(m["next"]),
        int(m["inc"]) if m["inc"] else None,
        int(m["rev"]) if m["rev"] else 0,
    )


@dataclass(frozen=True, slots=True)
class SegmentDescriptor:
    topic: str
    start_offset: int
    #: Exclusive end: the object holds offsets ``start_offset .. next_offset - 1``.
    next_offset: int
    object_key: str
    size_bytes: int
    #: crc32c of the whole object.
    crc32c: int
    max_publish_time_ms: int = 0
    uploaded_at_ms: int = 0
    #: The broker whose data directory it came from.
    broker_id: str = ""
    #: False for a tail cut from a segment that was still open (a hand-over or a dead broker).
    sealed: bool = True
    #: The topic's incarnation (None: before incarnations were recorded).
    incarnation: int | None = None
    #: Highest sequence id per producer name among the object's records (idempotent producers
    #: keep their deduplication when a ``cloud`` topic is taken over from a dead broker).
    producer_sequences: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SegmentDescriptor:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def covers(self, offset: int) -> bool:
        return self.start_offset <= offset < self.next_offset


def check_disjoint(descriptors: Iterable[SegmentDescriptor]) -> list[SegmentDescriptor]:
    """Sorted by start offset; ValueError naming the first overlap."""
    out = sorted(descriptors, key=lambda d: d.start_offset)
    for a, b in itertools.pairwise(out):
        if b.start_offset < a.next_offset:
            raise ValueError(
                f"overlapping descriptors for {a.topic}: [{a.start_offset}, {a.next_offset}) and "
                f"[{b.start_offset}, {b.next_offset})"
            )
    return out


def gaps(descriptors: Sequence[SegmentDescriptor], *, first: int, end: int) -> list[tuple[int, int]]:
    """Ranges in ``[first, end)`` no descriptor covers (sorted, disjoint descriptors)."""
    holes: list[tuple[int, int]] = []
    at = first
    for d in descriptors:
        if d.next_offset <= at:
            continue
        if d.start_offset >= end:
            break
        if d.start_offset > at:
            holes.append((at, min(d.start_offset, end)))
        at = max(at, d.next_offset)
    if at < end:
        holes.append((at, end))
    return holes


def find(descriptors: Sequence[SegmentDescriptor], offset: int) -> SegmentDescriptor | None:
    """The descriptor holding ``offset`` (sorted, disjoint descriptors), by bisection."""
    lo, hi = 0, len(descriptors)
    while lo < hi:
        mid = (lo + hi) // 2
        if descriptors[mid].next_offset <= offset:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(descriptors) and descriptors[lo].covers(offset):
        return descriptors[lo]
    return None


def covered_until(descriptors: Sequence[SegmentDescriptor], offset: int) -> int:
    """Follow the descriptors from ``offset``: the first offset at or after it that no
    descriptor covers (``offset`` itself when none covers it). Sorted, disjoint descriptors."""
    at = offset
    while (d := find(descriptors, at)) is not None:
        at = d.next_offset
    return at


def overlapping(
    descriptors: Iterable[SegmentDescriptor], start_offset: int, next_offset: int
) -> list[SegmentDescriptor]:
    """The descriptors sharing at least one offset with ``[start_offset, next_offset)``, sorted."""
    return sorted(
        (d for d in descriptors if d.start_offset < next_offset and start_offset < d.next_offset),
        key=lambda d: d.start_offset,
    )
