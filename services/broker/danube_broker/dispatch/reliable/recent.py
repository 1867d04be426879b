"""The message objects of a reliable topic's latest publishes, for its dispatchers.

A published batch arrives as protobuf objects, is stamped and serialised into the WAL, and each
subscription's dispatcher then reads the records back from the tail cache. Parsing each record
again cost a dispatcher more than anything else it does per message with many quiet topics
(a message per wake-up). The topic keeps the stamped objects here, by offset, until every
subscription has read past them, and the dispatchers take them instead of parsing.

The objects are shared by every subscription of the topic and must not be changed after
:meth:`RecentMessages.add`: a dispatcher copies one before setting its ``redelivery_count``.
Bounded by ``max_entries`` and ``max_bytes`` (the oldest go first), and kept only for the
subscriptions reading near the tail (the topic's part, ``ReliableTopic._published``): one with no
consumer or a backlog parses what it reads and makes the topic hold nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from danube_broker.dispatch.base import Msg

DEFAULT_MAX_ENTRIES = 256
DEFAULT_MAX_BYTES = 256 * 1024


class RecentMessages:
    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_entries = max(0, max_entries)
        self._max_bytes = max(0, max_bytes)
        self._by_offset: dict[int, tuple[Msg, int]] = {}
        #: No entry below this offset (the next to look at when trimming).
        self._low = 0
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._by_offset)

    def get(self, offset: int) -> Msg | None:
        hit = self._by_offset.get(offset)
        return None if hit is None else hit[0]

    def add(self, first: int, msgs: Sequence[Msg], sizes: Sequence[int]) -> None:
        """``msgs`` are stored at ``first``, ``first + 1``, ... (their ``msg_id.topic_offset``)."""
        if not self.max_entries:
            return
        by_offset = self._by_offset
        for i, (m, size) in enumerate(zip(msgs, sizes, strict=True)):
            by_offset[first + i] = (m, size)
            self.bytes += size
        self._low = min(self._low, first)
        while len(by_offset) > self.max_entries or self.bytes > self._max_bytes:
            self._drop_lowest()

    def trim(self, below: int) -> None:
        """Forget offsets below ``below`` (every subscription has read them)."""
        by_offset = self._by_offset
        if not by_offset:
            self._low = max(self._low, below)
            return
        if below - self._low > len(by_offset):
            for offset in [o for o in by_offset if o < below]:
                self.bytes -= by_offset.pop(offset)[1]
        else:
            for offset in range(self._low, below):
                hit = by_offset.pop(offset, None)
                if hit is not None:
                    self.bytes -= hit[1]
        self._low = max(self._low, below)

    def clear(self) -> None:
        self._by_offset.clear()
        self.bytes = 0

    def _drop_lowest(self) -> None:
        """Drop the oldest entry added (offsets are added in increasing order but for batches
        whose commits finished in another order: then it is one of the lowest)."""
        by_offset = self._by_offset
        offset = next(iter(by_offset))
        self.bytes -= by_offset.pop(offset)[1]
