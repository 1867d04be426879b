"""Acknowledgements waiting to be sent, grouped by partition topic (one AckBatch each)."""

from __future__ import annotations


class AckBuffer:
    __slots__ = ("_by_topic", "count")

    def __init__(self) -> None:
        self._by_topic: dict[str, list[int]] = {}
        self.count = 0

    def add(self, topic: str, offset: int) -> int:
        """Buffer one offset; return how many are buffered now."""
        offsets = self._by_topic.get(topic)
        if offsets is None:
            self._by_topic[topic] = [offset]
        else:
            offsets.append(offset)
        self.count += 1
        return self.count

    def add_many(self, topic: str, offsets: list[int]) -> None:
        self._by_topic.setdefault(topic, []).extend(offsets)
        self.count += len(offsets)

    def take(self) -> dict[str, list[int]]:
        """Everything buffered, per topic in the order acked; the buffer is left empty."""
        out, self._by_topic = self._by_topic, {}
        self.count = 0
        return out
