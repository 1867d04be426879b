"""Where a reliable topic's log may be cut: the retention rule as a pure function.

Messages every subscription acknowledged may go, unless the topic's retention keeps them:

- ``retention_time_s`` > 0: keep messages published within that time;
- ``retention_size_bytes`` > 0: keep the newest segments up to that many bytes;
- both 0: keep nothing that is acknowledged.

With no subscription nothing is acknowledged by anyone. Then, if either limit is set, the limits
alone decide (the log is a replay buffer of that size/age); with both limits at 0 everything
is kept (nothing says what could go).

The WAL deletes whole sealed segments below the point, so the log keeps at least what the
point says and usually a little more.

Object storage (:func:`archive_cut`) follows the same rule with one difference: with both limits
at 0 it keeps everything (it is the topic's archive: Spark reads it, any broker serves any
offset of it). With a limit set, uploaded segments go under the rule above, whole, oldest
first, the time rule judged by each segment's newest publish time; the newest uploaded segment
always stays (a new owner continues the log where it ends).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


def retention_point(
    *,
    first_offset: int,
    next_offset: int,
    acked_before: int | None,
    time_point: int | None,
    size_limit_bytes: int,
    segments: Sequence[tuple[int, int]],
) -> int:
    """The offset below which the log may be truncated.

    ``acked_before``: every subscription acknowledged everything below it (None: there are no
    subscriptions). ``time_point``: the first offset young enough to keep under the time rule
    (None: no time rule). ``segments``: (start offset, bytes) of the kept segments, oldest first.
    """
    limited = time_point is not None or size_limit_bytes > 0
    if acked_before is None:
        if not limited:
            return first_offset
        point = next_offset
    else:
        point = acked_before
    if time_point is not None:
        point = min(point, time_point)
    if size_limit_bytes > 0:
        point = min(point, size_point(segments, size_limit_bytes, next_offset))
    return max(first_offset, min(point, next_offset))


def size_point(segments: Sequence[tuple[int, int]], limit_bytes: int, next_offset: int) -> int:
    """The start of the oldest segment among the newest ones that fit in ``limit_bytes``."""
    kept = 0
    point = next_offset
    for start, size in reversed(segments):
        if kept + size > limit_bytes:
            break
        kept += size
        point = start
    return point


def estimated_segments(
    first_offset: int, next_offset: int, total_bytes: int, segments: int
) -> list[tuple[int, int]]:
    """Equal-sized stand-ins for the real segments when the log only reports totals."""
    count = max(1, segments)
    span = next_offset - first_offset
    if span <= 0:
        return []
    out: list[tuple[int, int]] = []
    for i in range(count):
        start = first_offset + span * i // count
        if out and start == out[-1][0]:
            continue
        out.append((start, total_bytes // count))
    return out


class Described(Protocol):
    """What :func:`archive_cut` reads of a segment descriptor (``danube_common.storage``)."""

    @property
    def start_offset(self) -> int: ...

    @property
    def next_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def max_publish_time_ms(self) -> int: ...


D = TypeVar("D", bound=Described)


def archive_cut(
    descriptors: Sequence[D],
    *,
    acked_before: int | None,
    now_ms: int,
    retention_time_s: int,
    retention_size_bytes: int,
) -> list[D]:
    """The uploaded segments retention deletes now: the oldest of ``descriptors`` (sorted,
    disjoint) that lie wholly below the retention point. None without a limit, never the newest.

    ``acked_before`` as in :func:`retention_point`. A segment whose newest publish time is
    unknown (0) is never old enough for the time rule.
    """
    if not descriptors or not (retention_time_s > 0 or retention_size_bytes > 0):
        return []
    time_point: int | None = None
    if retention_time_s > 0:
        cutoff_ms = now_ms - retention_time_s * 1000
        time_point = descriptors[-1].next_offset
        for d in descriptors:
            if not (0 < d.max_publish_time_ms < cutoff_ms):
                time_point = d.start_offset
                break
    point = retention_point(
        first_offset=descriptors[0].start_offset,
        next_offset=descriptors[-1].start_offset,  # the newest segment stays
        acked_before=acked_before,
        time_point=time_point,
        size_limit_bytes=retention_size_bytes,
        segments=[(d.start_offset, d.size_bytes) for d in descriptors],
    )
    return [d for d in descriptors if d.next_offset <= point]
