"""A consumer's bounded delivery queue, holding whole batches rather than single messages.

Publishing hands the same list object to every subscription; a queue keeps that list (or the
slice of it that fits) as one chunk, so a 500-message batch costs one append, and a frame of
up to N messages is taken with at most a few slices. Capacity is counted in messages.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BoundedBatchQueue(Generic[T]):
    def __init__(self, capacity: int, *, on_space: Callable[[], None] | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"queue capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._chunks: deque[list[T]] = deque()
        #: Index of the first not-yet-taken item of ``_chunks[0]``.
        self._head = 0
        self._size = 0
        self._on_space = on_space

    def __len__(self) -> int:
        return self._size

    @property
    def free(self) -> int:
        return self.capacity - self._size

    def offer(self, items: list[T]) -> int:
        """Append the longest prefix of ``items`` that fits; return how many were taken.

        ``items`` is kept by reference when it fits whole: callers must not mutate it.
        """
        n = min(len(items), self.capacity - self._size)
        if n <= 0:
            return 0
        self._chunks.append(items if n == len(items) else items[:n])
        self._size += n
        return n

    def take(self, max_items: int) -> list[T]:
        """Remove and return up to ``max_items`` items in order (empty if the queue is empty)."""
        if self._size == 0 or max_items <= 0:
            return []
        chunks = self._chunks
        first = chunks[0]
        avail = len(first) - self._head
        if avail <= max_items and self._head == 0 and (avail == max_items or len(chunks) == 1):
            # The common case: hand back a whole chunk, no copy.
            chunks.popleft()
            self._size -= avail
            self._notify()
            return first
        out: list[T] = []
        want = max_items
        while want > 0 and chunks:
            first = chunks[0]
            avail = len(first) - self._head
            if avail <= want:
                out.extend(first[self._head :] if self._head else first)
                chunks.popleft()
                self._head = 0
                want -= avail
            else:
                out.extend(first[self._head : self._head + want])
                self._head += want
                want = 0
        self._size -= len(out)
        self._notify()
        return out

    def clear(self) -> int:
        """Discard everything; return how many items were discarded."""
        n = self._size
        self._chunks.clear()
        self._head = 0
        self._size = 0
        if n:
            self._notify()
        return n

    def _notify(self) -> None:
        if self._on_space is not None:
            self._on_space()
