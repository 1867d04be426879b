"""The acknowledgement state of one subscription: a cursor plus the acks above it.

The **cursor** is the highest offset N such that every offset <= N is acknowledged (-1: none
yet). Acks may arrive in any order; an ack above ``cursor + 1`` is kept in a set until the gap
below it closes, and the cursor then walks over every contiguous acked offset at once. Each
offset is added and removed from the set once, so advancing is amortised O(1) per ack, and
the set only ever holds the acks of messages still in flight above a gap (bounded by the
subscription's pending messages, not by the log).

Pure bookkeeping: no I/O, no clock. The cursor is what gets persisted; the set is not (after
a restart, messages above the cursor are delivered again: at-least-once).
"""

from __future__ import annotations

from collections.abc import Iterable

NO_CURSOR = -1


class AckTracker:
    __slots__ = ("_above", "cursor")

    def __init__(self, cursor: int = NO_CURSOR) -> None:
        if cursor < NO_CURSOR:
            raise ValueError(f"cursor must be >= {NO_CURSOR}, got {cursor}")
        self.cursor = cursor
        #: Acked offsets above ``cursor + 1`` (never contains ``cursor + 1`` itself).
        self._above: set[int] = set()

    def is_acked(self, offset: int) -> bool:
        return offset <= self.cursor or offset in self._above

    @property
    def acked_above(self) -> int:
        """How many offsets above the cursor are acknowledged."""
        return len(self._above)

    def ack(self, offset: int) -> bool:
        """Acknowledge ``offset``; True if the cursor moved."""
        return self.ack_many((offset,))

    def ack_many(self, offsets: Iterable[int]) -> bool:
        """:meth:`ack` each of ``offsets``; True if the cursor moved."""
        start = cursor = self.cursor
        above = self._above
        for o in offsets:
            if o <= cursor:
                continue
            if o != cursor + 1:
                above.add(o)
                continue
            cursor = o
            while above and cursor + 1 in above:
                cursor += 1
                above.remove(cursor)
        self.cursor = cursor
        return cursor != start

    def ack_through(self, offset: int) -> bool:
        """Cumulative: acknowledge every offset <= ``offset``; True if the cursor moved."""
        if offset <= self.cursor:
            return False
        self._above = {o for o in self._above if o > offset}
        self.cursor = offset - 1
        self.ack_many((offset,))  # moves to offset, and on over the acks just above it
        return True

    def reset(self, cursor: int) -> None:
        """Forget every ack and set the cursor (seek)."""
        if cursor < NO_CURSOR:
            raise ValueError(f"cursor must be >= {NO_CURSOR}, got {cursor}")
        self.cursor = cursor
        self._above.clear()
