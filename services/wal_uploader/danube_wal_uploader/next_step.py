"""What to do next for one topic: pure planning, no I/O.

Inputs are values: the topic's local segments (as listed from its directory), its descriptors
and checkpoint (as read from etcd) and how far the open segment may be read. The answer is one
:data:`Step`:

- :class:`Advance`: descriptors already cover ``[checkpoint, to)`` (a previous run stored them
  and crashed before moving the checkpoint, or cut a shorter tail there): move the checkpoint.
- :class:`Upload`: copy ``[start, end)`` of one local segment to object storage. Always starts
  at the checkpoint, so a topic's objects are contiguous and disjoint.
- :class:`Idle`: nothing to do now (caught up, or the rest is in the open segment).
- :class:`Gap`: the next offset to upload is neither in object storage nor on this disk (another
  uploader holds it, or it is lost): wait, never skip (only an operator's recorded decision, an
  accepted gap, covers such offsets).
- :class:`Conflict`: the next upload would overlap a descriptor (or the descriptors overlap each
  other): refuse. Offsets are assigned once, so this means two histories; an operator must look.

Where the next upload starts (the effective checkpoint ``N``): the checkpoint; with no
checkpoint, the lowest local offset (or the lowest descriptor's, if lower); then, while a
descriptor covers ``N``, its end. The broker sets the checkpoint when it opens a log's first
stint (``LogRecords.open_stint``), so "no checkpoint" is only met by logs opened before it did:
there a later writer's disk would start past what an earlier writer's uploader has not shipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from danube_common.storage import SegmentDescriptor, check_disjoint, covered_until, overlapping

#: ``open_limit`` meaning "every intact frame of the open segment" (the broker is dead).
UNBOUNDED = 1 << 63


@dataclass(frozen=True, slots=True)
class LocalSegment:
    """A segment file as listed from the topic directory."""

    first_offset: int
    #: Exclusive end. Sealed: exact (from its ``.idx``). Open: where its frames end as far as
    #: last seen (a progress estimate; None when not looked at).
    next_offset: int | None
    #: Sealed (``.idx`` present, or a later segment exists): final and fully durable.
    sealed: bool
    #: File size (lag estimates).
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Advance:
    to: int


@dataclass(frozen=True, slots=True)
class Upload:
    #: The local segment to read (its first offset).
    segment: int
    start: int
    #: Exclusive. From a sealed segment: exact. From the open one: an upper bound; the read
    #: stops at the last intact frame below it.
    end: int
    sealed: bool


@dataclass(frozen=True, slots=True)
class Idle:
    reason: str


@dataclass(frozen=True, slots=True)
class Gap:
    #: Offsets ``[start, local_first)`` are neither described nor on this disk.
    start: int
    local_first: int

    def message(self) -> str:
        return (
            f"offsets {self.start}..{self.local_first - 1} are neither in object storage nor on this disk: "
            "waiting for the uploader that holds them (never skipped)"
        )


@dataclass(frozen=True, slots=True)
class Conflict:
    start: int
    end: int
    detail: str


Step = Advance | Upload | Idle | Gap | Conflict


def effective_start(
    checkpoint: int | None, descriptors: Sequence[SegmentDescriptor], local_first: int | None
) -> int | None:
    """``N`` before following descriptors (sorted; None: nothing known at all)."""
    if checkpoint is not None:
        return checkpoint
    first_described = descriptors[0].start_offset if descriptors else None
    known = [o for o in (local_first, first_described) if o is not None]
    return min(known) if known else None


def next_step(
    *,
    checkpoint: int | None,
    descriptors: Sequence[SegmentDescriptor],
    segments: Sequence[LocalSegment],
    open_limit: int | None,
    bound: int = UNBOUNDED,
    gaps: Sequence[tuple[int, int]] = (),
) -> Step:
    """The next step for a topic.

    ``segments``: the local segments in any order (at most one open, the last). ``open_limit``:
    how far the open segment may be uploaded (exclusive): None = not at all (the broker is
    alive and only sealed segments are known to be durable), an offset (a Flush's
    ``up_to_offset``: the broker's durable offset), or :data:`UNBOUNDED` (the broker is dead:
    every intact frame). ``bound``: no upload reaches this offset (what this disk holds past it
    is not the topic's history: ``danube_common.log_state.upload_bound``). ``gaps``: accepted
    gaps (``[start, end)`` declared lost by an operator): covered like descriptors, never
    uploaded into.
    """
    try:
        descs = check_disjoint(descriptors)
    except ValueError as exc:
        return Conflict(-1, -1, f"the topic's descriptors overlap each other: {exc}")
    segs = sorted(segments, key=lambda s: s.first_offset)
    local_first = segs[0].first_offset if segs else None
    start = effective_start(checkpoint, descs, local_first)
    if start is None:
        return Idle("no local data and nothing uploaded")
    n = _covered_until(descs, gaps, start)
    if n > start:
        # Descriptors (or accepted gaps) already cover [start, n): the checkpoint only has to catch up.
        return Advance(n)
    if n >= bound:
        return Idle("caught up with what this disk may contribute (the log continues elsewhere)")
    if not segs:
        return Idle("no local data")
    assert local_first is not None
    if n < local_first:
        return Gap(n, local_first)
    seg = _holding(segs, n)
    if seg is None:
        later = [s.first_offset for s in segs if s.first_offset > n]
        if later:
            return Gap(n, later[0])
        return Idle("caught up")
    if seg.sealed:
        assert seg.next_offset is not None
        end = seg.next_offset
    else:
        if open_limit is None:
            return Idle("the rest is in the open segment")
        end = open_limit
        if open_limit != UNBOUNDED and end <= n:
            return Idle("caught up to the requested offset")
    end = min(end, bound)
    clash = overlapping(descs, n, end)
    if clash:
        shown = ", ".join(f"[{d.start_offset}, {d.next_offset})" for d in clash[:3])
        return Conflict(n, end, f"uploading [{n}, {end}) would overlap the descriptor(s) {shown}")
    lost = [(a, b) for a, b in gaps if a < end and n < b]
    if lost:
        return Conflict(
            n, end, f"uploading [{n}, {end}) would overlap the accepted gap [{lost[0][0]}, {lost[0][1]})"
        )
    return Upload(seg.first_offset, n, end, seg.sealed)


def _covered_until(
    descriptors: Sequence[SegmentDescriptor], gaps: Sequence[tuple[int, int]], offset: int
) -> int:
    """Follow descriptors and accepted gaps from ``offset``: the first offset neither covers."""
    at = offset
    while True:
        nxt = covered_until(descriptors, at)
        for a, b in gaps:
            if a <= nxt < b:
                nxt = b
        if nxt == at:
            return at
        at = nxt


def _holding(segs: Sequence[LocalSegment], offset: int) -> LocalSegment | None:
    """The local segment holding ``offset``: a sealed one covering it, or the open one when the
    offset is at or after its start and not past its known end (at its end: the upload finds
    nothing new, which is how the end of a dead broker's log is confirmed)."""
    for s in segs:
        if s.sealed:
            assert s.next_offset is not None
            if s.first_offset <= offset < s.next_offset:
                return s
        elif s.first_offset <= offset and (s.next_offset is None or offset <= s.next_offset):
            return s
    return None


def lag_bytes(segments: Sequence[LocalSegment], uploaded: int, *, header_bytes: int) -> int:
    """Bytes of frames on disk at or after offset ``uploaded`` (a segment partly uploaded counts
    in proportion to its offsets: an estimate)."""
    total = 0
    for s in segments:
        body = max(0, s.size_bytes - header_bytes)
        nxt = s.next_offset
        if nxt is not None and nxt <= uploaded:
            continue
        if s.first_offset >= uploaded or nxt is None or nxt <= s.first_offset:
            total += body
        else:
            total += body * (nxt - uploaded) // (nxt - s.first_offset)
    return total


def local_end(segments: Sequence[LocalSegment]) -> int | None:
    """Where the local log ends as far as known (None: no segment)."""
    if not segments:
        return None
    last = max(segments, key=lambda s: s.first_offset)
    return last.next_offset if last.next_offset is not None else last.first_offset
