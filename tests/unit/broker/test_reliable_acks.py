"""The cursor structure: any ack order gives the longest acknowledged prefix."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danube_broker.dispatch.reliable.acks import NO_CURSOR, AckTracker

pytestmark = pytest.mark.unit


def longest_prefix(start: int, acked: set[int]) -> int:
    cursor = start
    while cursor + 1 in acked:
        cursor += 1
    return cursor


@settings(max_examples=300, deadline=None)
@given(
    start=st.integers(min_value=-1, max_value=50),
    acks=st.lists(st.integers(min_value=-5, max_value=120), max_size=200),
)
def test_any_ack_order_gives_the_longest_acked_prefix(start: int, acks: list[int]) -> None:
    tracker = AckTracker(start)
    seen: set[int] = set()
    for offset in acks:
        before = tracker.cursor
        moved = tracker.ack(offset)
        seen.add(offset)
        assert tracker.cursor == longest_prefix(start, seen)
        assert moved == (tracker.cursor != before)
        assert tracker.acked_above == len({o for o in seen if o > tracker.cursor})
    for offset in range(-5, 125):
        assert tracker.is_acked(offset) == (offset <= tracker.cursor or offset in seen)


@settings(max_examples=200, deadline=None)
@given(
    acks=st.lists(st.integers(min_value=0, max_value=60), max_size=80),
    through=st.integers(min_value=-1, max_value=70),
)
def test_cumulative_ack_is_every_offset_up_to_it(acks: list[int], through: int) -> None:
    tracker = AckTracker()
    tracker.ack_many(acks)
    tracker.ack_through(through)
    expected = longest_prefix(NO_CURSOR, set(acks) | set(range(through + 1)))
    assert tracker.cursor == expected
    assert tracker.acked_above == len({o for o in acks if o > expected})


def test_reset_forgets_acks_and_bad_cursors_are_refused() -> None:
    tracker = AckTracker()
    tracker.ack_many([0, 1, 5])
    tracker.reset(3)
    assert tracker.cursor == 3 and tracker.acked_above == 0 and not tracker.is_acked(5)
    with pytest.raises(ValueError, match="cursor"):
        AckTracker(-2)


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["ack", "through", "reset"]), st.integers(min_value=-2, max_value=80)),
        max_size=120,
    )
)
def test_any_mix_of_acks_cumulative_acks_and_seeks_matches_a_set_model(ops: list[tuple[str, int]]) -> None:
    tracker, cursor, acked = AckTracker(), NO_CURSOR, set()
    for op, offset in ops:
        if op == "ack":
            tracker.ack(offset)
            acked.add(offset)
        elif op == "through":
            tracker.ack_through(offset)
            acked |= set(range(cursor + 1, offset + 1))
        elif offset >= NO_CURSOR:
            tracker.reset(offset)
            cursor, acked = offset, set()
        cursor = longest_prefix(cursor, acked)
        acked = {o for o in acked if o > cursor}
        assert tracker.cursor == cursor and tracker.acked_above == len(acked)
        assert all(tracker.is_acked(o) == (o <= cursor or o in acked) for o in range(-2, 84))
        assert tracker.ranges <= len(acked)


def test_acks_past_one_long_open_gap_are_one_range() -> None:
    """A message left unacknowledged (a delayed one) while 200,000 later ones are acked: the
    tracker holds one range, and closing the gap moves the cursor over all of it at once."""
    tracker = AckTracker()
    tracker.ack(0)
    tracker.ack_many(range(2, 200_002))
    assert (tracker.cursor, tracker.acked_above, tracker.ranges) == (0, 200_000, 1)
    tracker.ack_many([200_005, 200_003])  # two more gaps, out of order
    assert tracker.ranges == 3
    assert tracker.ack(1) and tracker.cursor == 200_001 and tracker.ranges == 2


def test_the_lowest_ranges_are_persisted_and_restored() -> None:
    tracker = AckTracker(4)
    tracker.ack_many([7, 8, 10, 20, 21, 22])
    assert tracker.persistable() == ((7, 8), (10, 10), (20, 22))
    assert tracker.persistable(limit=2) == ((7, 8), (10, 10))  # a prefix: still all true
    again = AckTracker(4)
    again.restore(tracker.persistable())
    assert (again.cursor, again.acked_above, again.ranges) == (4, 6, 3)
    assert [o for o in range(30) if again.is_acked(o)] == [o for o in range(30) if tracker.is_acked(o)]
    folded = AckTracker(4)
    folded.restore(((2, 3), (5, 6), (9, 9), (9, 11)))  # below, touching the cursor, overlapping
    assert (folded.cursor, folded.acked_above, folded.ranges) == (6, 3, 1)
    assert folded.is_acked(10) and not folded.is_acked(8)
