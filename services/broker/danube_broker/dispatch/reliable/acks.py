"""The acknowledgement state of one subscription: a cursor plus the acks above it.

The **cursor** is the highest offset N such that every offset <= N is acknowledged (-1: none
yet). Acks may arrive in any order; an ack above ``cursor + 1`` is kept until the gap below it
closes, and the cursor then walks over every contiguous acked run at once.

Acks above the cursor are kept as **ranges** (sorted, disjoint, non-adjacent ``[lo, hi]``), not
one entry per offset: what they cost grows with the number of gaps, not with how many messages
were acknowledged past a gap. That matters for a gap that stays open long: a delayed message
(delivered hours later, every later message acknowledged meanwhile) leaves one gap and one
range however many messages follow it. Acks that arrive in order extend the last range in O(1)
(amortised); an ack that lands elsewhere costs a binary search and, when it opens a new gap or
closes one, a list insert/delete (O(ranges)).

Pure bookkeeping: no I/O, no clock. The cursor is persisted, and with it the lowest
``MAX_PERSISTED_RANGES`` ranges (:meth:`AckTracker.persistable`; :meth:`AckTracker.restore`
puts them back): after a restart or move, what those ranges cover is not delivered again; what
was acknowledged above them is (at-least-once).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

NO_CURSOR = -1
#: Acked ranges above the cursor written with it (the lowest ones: where redelivery starts).
MAX_PERSISTED_RANGES = 64

#: Acked ranges as persisted: ``((lo, hi), ...)``, sorted, each above the cursor.
Ranges = tuple[tuple[int, int], ...]


class AckTracker:
    __slots__ = ("_count", "_hi", "_lo", "cursor")

    def __init__(self, cursor: int = NO_CURSOR) -> None:
        if cursor < NO_CURSOR:
            raise ValueError(f"cursor must be >= {NO_CURSOR}, got {cursor}")
        self.cursor = cursor
        #: Acked ranges above ``cursor + 1``: ``[_lo[i], _hi[i]]``, sorted, disjoint and not
        #: touching (never containing ``cursor + 1``).
        self._lo: list[int] = []
        self._hi: list[int] = []
        #: Offsets in those ranges.
        self._count = 0

    def is_acked(self, offset: int) -> bool:
        if offset <= self.cursor:
            return True
        i = bisect_right(self._lo, offset) - 1
        return i >= 0 and offset <= self._hi[i]

    @property
    def acked_above(self) -> int:
        """How many offsets above the cursor are acknowledged."""
        return self._count

    @property
    def ranges(self) -> int:
        """Acked ranges kept above the cursor (one per gap closed on both sides)."""
        return len(self._lo)

    def persistable(self, limit: int = MAX_PERSISTED_RANGES) -> Ranges:
        """The lowest ``limit`` acked ranges above the cursor, to persist with it."""
        return tuple(zip(self._lo[:limit], self._hi[:limit], strict=True))

    def restore(self, ranges: Ranges) -> None:
        """Acknowledge the persisted ``ranges`` again (after :meth:`persistable` was written with
        this cursor), on a tracker holding no range yet (a fresh engine). Ranges at or below the
        cursor, or touching it, are folded in."""
        for lo, hi in sorted(ranges):
            if hi <= self.cursor or lo > hi:
                continue
            if lo <= self.cursor + 1:
                self.ack_through(hi)
                continue
            lows, highs = self._lo, self._hi
            if lows and lo <= highs[-1] + 1:  # overlaps or touches the last range: merge
                if hi > highs[-1]:
                    self._count += hi - highs[-1]
                    highs[-1] = hi
                continue
            lows.append(lo)
            highs.append(hi)
            self._count += hi - lo + 1

    def ack(self, offset: int) -> bool:
        """Acknowledge ``offset``; True if the cursor moved."""
        return self.ack_many((offset,))

    def ack_many(self, offsets: Iterable[int]) -> bool:
        """:meth:`ack` each of ``offsets``; True if the cursor moved."""
        start = cursor = self.cursor
        lo, hi = self._lo, self._hi
        for o in offsets:
            if o <= cursor:
                continue
            if o == cursor + 1:
                cursor = o
                if lo and lo[0] == cursor + 1:  # the gap closed: walk over the first range
                    cursor = hi[0]
                    self._count -= hi[0] - lo[0] + 1
                    del lo[0]
                    del hi[0]
                continue
            self._add(o)
        self.cursor = cursor
        return cursor != start

    def _add(self, o: int) -> None:
        lo, hi = self._lo, self._hi
        n = len(lo)
        if n:
            last = hi[-1]
            if o == last + 1:  # the common case: acks in order past a gap
                hi[-1] = o
                self._count += 1
                return
            if o > last + 1:  # past every range: a new one at the end
                lo.append(o)
                hi.append(o)
                self._count += 1
                return
        i = bisect_right(lo, o) - 1  # the range starting at or before o, if any
        if i >= 0 and o <= hi[i]:
            return  # acked already
        joins_left = i >= 0 and hi[i] == o - 1
        joins_right = i + 1 < n and lo[i + 1] == o + 1
        if joins_left and joins_right:
            hi[i] = hi[i + 1]
            del lo[i + 1]
            del hi[i + 1]
        elif joins_left:
            hi[i] = o
        elif joins_right:
            lo[i + 1] = o
        else:
            lo.insert(i + 1, o)
            hi.insert(i + 1, o)
        self._count += 1

    def ack_range(self, first: int, last: int) -> bool:
        """Acknowledge every offset in ``[first, last]`` (one range, whatever its length: offsets
        a compacted view left out); True if the cursor moved."""
        if last < first or last <= self.cursor:
            return False
        if first <= self.cursor + 1:
            return self.ack_through(last)
        lo, hi = self._lo, self._hi
        i = bisect_left(hi, first - 1)  # the first range ending at or after first - 1 (touching)
        j = bisect_right(lo, last + 1)  # ranges [i, j) overlap or touch [first, last]
        if i < j:
            removed = sum(hi[k] - lo[k] + 1 for k in range(i, j))
            first, last = min(first, lo[i]), max(last, hi[j - 1])
            del lo[i:j]
            del hi[i:j]
        else:
            removed = 0
        lo.insert(i, first)
        hi.insert(i, last)
        self._count += last - first + 1 - removed
        return False  # first > cursor + 1: the cursor stays

    def ack_through(self, offset: int) -> bool:
        """Cumulative: acknowledge every offset <= ``offset``; True if the cursor moved."""
        if offset <= self.cursor:
            return False
        lo, hi = self._lo, self._hi
        while lo and lo[0] <= offset:  # ranges starting at or below it are covered (or cut)
            if hi[0] <= offset:
                self._count -= hi[0] - lo[0] + 1
                del lo[0]
                del hi[0]
            else:
                self._count -= offset - lo[0] + 1
                lo[0] = offset + 1
                break
        self.cursor = offset - 1
        self.ack_many((offset,))  # moves to offset, and on over the acks just above it
        return True

    def reset(self, cursor: int) -> None:
        """Forget every ack and set the cursor (seek)."""
        if cursor < NO_CURSOR:
            raise ValueError(f"cursor must be >= {NO_CURSOR}, got {cursor}")
        self.cursor = cursor
        self._lo.clear()
        self._hi.clear()
        self._count = 0
