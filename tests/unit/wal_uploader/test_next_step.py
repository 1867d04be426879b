"""The uploader's planning, as tables: local segments + descriptors + checkpoint -> next step."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.storage import (
    SegmentDescriptor,
    check_disjoint,
    covered_until,
    gaps,
    object_key,
    overlapping,
)
from danube_common.topic_name import TopicName
from danube_wal_uploader.next_step import (
    UNBOUNDED,
    Advance,
    Conflict,
    Gap,
    Idle,
    LocalSegment,
    Step,
    Upload,
    lag_bytes,
    local_end,
    next_step,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = TopicName("default", "orders")


def d(start: int, nxt: int) -> SegmentDescriptor:
    return SegmentDescriptor(str(T), start, nxt, object_key(T, start, nxt), 10, 0)


def sealed(first: int, nxt: int, size: int = 0) -> LocalSegment:
    return LocalSegment(first, nxt, True, size)


def open_(first: int, nxt: int | None = None, size: int = 0) -> LocalSegment:
    return LocalSegment(first, nxt, False, size)


DISK = [sealed(0, 100), sealed(100, 200), open_(200, 250)]

CASES: list[tuple[str, int | None, list[SegmentDescriptor], list[LocalSegment], int | None, Step]] = [
    # name, checkpoint, descriptors, local segments, open_limit, expected
    ("fresh topic: first sealed segment", None, [], DISK, None, Upload(0, 0, 100, True)),
    ("checkpoint mid-way: next sealed segment", 100, [d(0, 100)], DISK, None, Upload(100, 100, 200, True)),
    (
        "sealed all done, broker alive: wait",
        200,
        [d(0, 100), d(100, 200)],
        DISK,
        None,
        Idle("the rest is in the open segment"),
    ),
    (
        "flush: open segment up to the durable offset",
        200,
        [d(0, 100), d(100, 200)],
        DISK,
        230,
        Upload(200, 200, 230, False),
    ),
    (
        "flush already satisfied",
        230,
        [d(0, 100), d(100, 200), d(200, 230)],
        DISK,
        230,
        Idle("caught up to the requested offset"),
    ),
    (
        "flush past a partial: the rest of the open segment",
        230,
        [d(0, 100), d(100, 200), d(200, 230)],
        DISK,
        245,
        Upload(200, 230, 245, False),
    ),
    (
        "dead broker: every intact frame of the open segment",
        200,
        [d(0, 100), d(100, 200)],
        DISK,
        UNBOUNDED,
        Upload(200, 200, UNBOUNDED, False),
    ),
    (
        "open segment partly flushed, then sealed: the rest of it",
        150,
        [d(0, 100), d(100, 150)],
        [sealed(100, 200), open_(200)],
        None,
        Upload(100, 150, 200, True),
    ),
    # crash after PUT, before the descriptor: nothing in etcd changed, the same upload again
    ("crash after PUT: same range again", 100, [d(0, 100)], DISK, None, Upload(100, 100, 200, True)),
    # crash after the descriptor, before the checkpoint: advance only
    ("crash after descriptor: advance", 100, [d(0, 100), d(100, 200)], DISK, None, Advance(200)),
    ("crash after the first descriptor, no checkpoint yet", None, [d(0, 100)], DISK, None, Advance(100)),
    # a previous run cut a shorter tail at N (a flush): continue from its end
    (
        "descriptor at N with a shorter end",
        200,
        [d(0, 100), d(100, 200), d(200, 220)],
        DISK,
        UNBOUNDED,
        Advance(220),
    ),
    ("descriptor at N with a longer end", 100, [d(0, 100), d(100, 260)], DISK, None, Advance(260)),
    (
        "advance over a chain of descriptors",
        0,
        [d(0, 100), d(100, 150), d(150, 200)],
        DISK,
        None,
        Advance(200),
    ),
    (
        "after advancing: the rest of the sealed segment",
        220,
        [d(0, 100), d(100, 200), d(200, 220)],
        [sealed(200, 300), open_(300)],
        None,
        Upload(200, 220, 300, True),
    ),
    # refusals
    (
        "a descriptor ahead inside the range: refuse",
        100,
        [d(0, 100), d(150, 160)],
        DISK,
        None,
        Conflict(100, 200, "uploading [100, 200) would overlap the descriptor(s) [150, 160)"),
    ),
    (
        "a descriptor ahead inside a flush range: refuse",
        200,
        [d(0, 200), d(240, 300)],
        DISK,
        250,
        Conflict(200, 250, "uploading [200, 250) would overlap the descriptor(s) [240, 300)"),
    ),
    (
        "a descriptor ahead beyond the range is fine",
        100,
        [d(0, 100), d(200, 300)],
        DISK,
        None,
        Upload(100, 100, 200, True),
    ),
    # gaps: never skipped
    (
        "local data starts after the checkpoint",
        50,
        [d(0, 50)],
        [sealed(100, 200), open_(200)],
        None,
        Gap(50, 100),
    ),
    (
        "hole between local segments",
        100,
        [d(0, 100)],
        [sealed(0, 100), sealed(120, 200), open_(200)],
        None,
        Gap(100, 120),
    ),
    # nothing to do
    (
        "local data all behind the checkpoint (an old stay here)",
        500,
        [d(0, 500)],
        DISK,
        UNBOUNDED,
        Idle("caught up"),
    ),
    ("no local data", 10, [d(0, 10)], [], None, Idle("no local data")),
    ("nothing at all", None, [], [], None, Idle("no local data and nothing uploaded")),
    (
        "only an open segment, broker alive",
        None,
        [],
        [open_(0, 40)],
        None,
        Idle("the rest is in the open segment"),
    ),
    (
        "no checkpoint, data starts later (history trimmed before any upload)",
        None,
        [],
        [sealed(70, 90), open_(90)],
        None,
        Upload(70, 70, 90, True),
    ),
]


@pytest.mark.parametrize(
    ("checkpoint", "descs", "segments", "open_limit", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_next_step(
    checkpoint: int | None,
    descs: list[SegmentDescriptor],
    segments: list[LocalSegment],
    open_limit: int | None,
    expected: Step,
) -> None:
    assert (
        next_step(checkpoint=checkpoint, descriptors=descs, segments=segments, open_limit=open_limit)
        == expected
    )


def test_overlapping_descriptors_are_a_conflict() -> None:
    step = next_step(checkpoint=0, descriptors=[d(0, 100), d(50, 150)], segments=DISK, open_limit=None)
    assert isinstance(step, Conflict) and "overlap each other" in step.detail


def test_segment_order_does_not_matter() -> None:
    assert next_step(checkpoint=100, descriptors=[d(0, 100)], segments=DISK[::-1], open_limit=None) == Upload(
        100, 100, 200, True
    )


def test_storage_helpers() -> None:
    ds = [d(0, 10), d(10, 20), d(30, 40)]
    assert covered_until(ds, 0) == 20
    assert covered_until(ds, 15) == 20
    assert covered_until(ds, 20) == 20
    assert covered_until(ds, 35) == 40
    assert covered_until([], 7) == 7
    assert overlapping(ds, 20, 30) == []
    assert overlapping(ds, 19, 31) == [d(10, 20), d(30, 40)]
    assert overlapping(ds, 40, 50) == []


def test_lag_and_local_end() -> None:
    segs = [sealed(0, 100, 1032), sealed(100, 200, 1032), open_(200, 250, 532)]
    assert local_end(segs) == 250
    assert local_end([open_(300)]) == 300
    assert local_end([]) is None
    assert lag_bytes(segs, 0, header_bytes=32) == 2500
    assert lag_bytes(segs, 100, header_bytes=32) == 1500
    assert lag_bytes(segs, 150, header_bytes=32) == 1000  # half of the second segment
    assert lag_bytes(segs, 250, header_bytes=32) == 0


@given(
    st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=12),
    st.data(),
)
def test_following_the_plan_uploads_everything_once(sizes: list[int], data: st.DataObject) -> None:
    """Simulate uploads (with crashes between PUT and descriptor, and between descriptor and
    checkpoint, at random): the descriptors end up disjoint and contiguous, covering every
    sealed offset, and the checkpoint at their end."""
    firsts = [0]
    for n in sizes:
        firsts.append(firsts[-1] + n)
    segments = [sealed(a, b) for a, b in itertools.pairwise(firsts)] + [open_(firsts[-1])]
    descs: list[SegmentDescriptor] = []
    checkpoint: int | None = None
    # Every segment takes at most two steps that are not crashes (upload, then advance); crashes
    # (as many as hypothesis draws) repeat a step without consuming this budget.
    budget = 2 * len(sizes) + 2
    while True:
        step = next_step(checkpoint=checkpoint, descriptors=descs, segments=segments, open_limit=None)
        if isinstance(step, Idle):
            break
        assert budget > 0, "the plan did not converge"
        if isinstance(step, Advance):
            checkpoint = step.to
            budget -= 1
            continue
        assert isinstance(step, Upload), step
        crash = data.draw(st.sampled_from(["none", "after_put", "after_descriptor"]))
        if crash == "after_put":
            continue  # nothing recorded: the next run uploads the same range again
        descs.append(d(step.start, step.end))
        budget -= 1
        if crash == "after_descriptor":
            continue
        checkpoint = step.end
    ordered = check_disjoint(descs)
    assert gaps(ordered, first=0, end=firsts[-1]) == []
    assert checkpoint == firsts[-1]
    assert len(ordered) == len(sizes)
