"""The consumer's receive buffer: every partition's frames merged into one bounded queue."""

from __future__ import annotations

import asyncio
import collections

from danube_sdk.types import Message


class ReceiveQueue:
    """FIFO of received messages.

    Partition readers append whole frames (``put_many``), waiting while the queue holds
    ``capacity`` messages or more, so a slow application stops reading from the stream and
    gRPC flow control pushes back on the broker. ``fail`` makes ``get`` raise once the
    buffered messages are drained.
    """

    def __init__(self, capacity: int) -> None:
        self._items: collections.deque[Message] = collections.deque()
        self._capacity = capacity
        self._not_empty = asyncio.Event()
        self._not_full = asyncio.Event()
        self._not_full.set()
        self._error: BaseException | None = None

    def __len__(self) -> int:
        return len(self._items)

    async def put_many(self, messages: list[Message]) -> None:
        while len(self._items) >= self._capacity and self._error is None:
            self._not_full.clear()
            await self._not_full.wait()
        self._items.extend(messages)
        if self._items:
            self._not_empty.set()

    def get_nowait(self) -> Message | None:
        """The next buffered message, or None when none is buffered (never waits)."""
        items = self._items
        if not items:
            return None
        msg = items.popleft()
        if len(items) < self._capacity:
            self._not_full.set()
        return msg

    def take(self, max_messages: int) -> list[Message]:
        """Up to ``max_messages`` buffered messages (never waits)."""
        items = self._items
        n = min(max_messages, len(items))
        out = [items.popleft() for _ in range(n)]
        if n and len(items) < self._capacity:
            self._not_full.set()
        return out

    async def get(self) -> Message:
        items = self._items
        while not items:
            if self._error is not None:
                raise self._error
            self._not_empty.clear()
            await self._not_empty.wait()
        msg = items.popleft()
        if len(items) < self._capacity:
            self._not_full.set()
        return msg

    def fail(self, err: BaseException, *, replace: bool = False) -> None:
        """Make ``get`` raise ``err`` when empty (the first error wins unless ``replace``);
        release waiting writers."""
        if self._error is None or replace:
            self._error = err
        self._not_empty.set()
        self._not_full.set()

    def purge(self, topic: str) -> int:
        """Drop the buffered messages of one (partition) topic; return how many (used by seek)."""
        kept = [m for m in self._items if m.topic != topic]
        dropped = len(self._items) - len(kept)
        if dropped:
            self._items = collections.deque(kept)
            if len(self._items) < self._capacity:
                self._not_full.set()
        return dropped

    def clear(self) -> None:
        self._items.clear()
        self._not_full.set()
