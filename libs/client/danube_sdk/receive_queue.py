"""The consumer's receive buffer: every partition's frames merged fairly into one bounded queue.

Each partition keeps its own FIFO; the application takes messages round-robin over the
partitions that have some, one message per turn, so a partition that delivered a frame of a
thousand messages does not put them all ahead of the others' (order within a partition is
kept). Flow control is per partition and work-conserving:

- the buffer holds ``capacity`` messages in total; while it holds fewer, any partition may add;
- each partition is guaranteed a *share* (``capacity // partitions``, at least one message):
  a partition below its share may add even when the buffer is full, so a busy partition cannot
  take the whole buffer and leave another stalled behind it;
- a partition reader that may not add waits (so it stops reading its stream and the broker is
  pushed back on that partition only); room is handed out one waiter at a time, in the order
  they started waiting.

The buffer can pass ``capacity`` by at most one frame per partition below its share.
"""

from __future__ import annotations

import asyncio
import collections

from danube_common.aio import LoopEvent
from danube_sdk.types import Message


class ReceiveQueue:
    """Partition readers add whole frames (:meth:`put_many`, all messages of one partition);
    the consumer takes with :meth:`get`, :meth:`get_nowait` and :meth:`take`. :meth:`fail` makes
    ``get`` raise once the buffered messages are drained."""

    def __init__(self, capacity: int, *, partitions: int = 1) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._capacity = capacity
        self._share = max(1, capacity // max(1, partitions))
        self._parts: dict[str, collections.deque[Message]] = {}
        #: Partitions holding messages, in turn order (the front is taken from next).
        self._ring: collections.deque[str] = collections.deque()
        self._len = 0
        self._not_empty = LoopEvent()
        #: Writers waiting for room, by partition, in the order they started waiting.
        self._waiting: dict[str, asyncio.Future[None]] = {}
        self._error: BaseException | None = None

    def __len__(self) -> int:
        return self._len

    def set_partitions(self, partitions: int) -> None:
        """The number of partitions changed (multi-topic consumers): recompute the share."""
        self._share = max(1, self._capacity // max(1, partitions))
        self._room_made(tuple(self._waiting))

    def buffered(self, topic: str) -> int:
        """Messages of one partition in the buffer."""
        part = self._parts.get(topic)
        return len(part) if part is not None else 0

    def _may_add(self, topic: str) -> bool:
        return self._len < self._capacity or self.buffered(topic) < self._share

    async def put_many(self, messages: list[Message]) -> None:
        """Add one frame (messages of one partition, in order); waits for room first."""
        if not messages:
            return
        topic = messages[0].topic
        while not self._may_add(topic) and self._error is None:
            fut = self._waiting.get(topic)
            if fut is None or fut.done():
                fut = asyncio.get_running_loop().create_future()
                self._waiting[topic] = fut
            await fut
        part = self._parts.get(topic)
        if part is None:
            part = self._parts[topic] = collections.deque()
        if not part:
            self._ring.append(topic)
        part.extend(messages)
        self._len += len(messages)
        self._not_empty.set()

    def _pop(self) -> Message:
        """The next message in turn (the caller checked that one is buffered)."""
        ring = self._ring
        topic = ring[0]
        part = self._parts[topic]
        msg = part.popleft()
        if part:
            ring.rotate(-1)  # its next message waits for the others' turns
        else:
            ring.popleft()
        self._len -= 1
        return msg

    def _room_made(self, topics: set[str] | tuple[str, ...]) -> None:
        """Wake the writers that may add now: a partition back under its share, then (while the
        buffer is under capacity) the longest-waiting one."""
        waiting = self._waiting
        if not waiting:
            return
        for topic in topics:
            if topic in waiting and self.buffered(topic) < self._share:
                waiting.pop(topic).set_result(None)
        if waiting and self._len < self._capacity:
            waiting.pop(next(iter(waiting))).set_result(None)

    def get_nowait(self) -> Message | None:
        """The next buffered message, or None when none is buffered (never waits)."""
        if not self._len:
            return None
        msg = self._pop()
        self._room_made((msg.topic,))
        return msg

    def take(self, max_messages: int) -> list[Message]:
        """Up to ``max_messages`` buffered messages, partitions taking turns (never waits)."""
        n = min(max_messages, self._len)
        if n <= 0:
            return []
        ring = self._ring
        if len(ring) == 1:  # one partition: no turns to take
            topic = ring[0]
            part = self._parts[topic]
            out = [part.popleft() for _ in range(n)]
            if not part:
                ring.popleft()
            self._len -= n
            self._room_made((topic,))
            return out
        out = [self._pop() for _ in range(n)]
        self._room_made({m.topic for m in out})
        return out

    async def get(self) -> Message:
        while not self._len:
            if self._error is not None:
                raise self._error
            self._not_empty.clear()
            await self._not_empty.wait()
        msg = self._pop()
        self._room_made((msg.topic,))
        return msg

    def fail(self, err: BaseException, *, replace: bool = False) -> None:
        """Make ``get`` raise ``err`` when empty (the first error wins unless ``replace``);
        release waiting writers."""
        if self._error is None or replace:
            self._error = err
        self._not_empty.set()
        self._wake_all()

    def purge(self, topic: str) -> int:
        """Drop the buffered messages of one (partition) topic; return how many (used by seek)."""
        part = self._parts.pop(topic, None)
        if not part:
            return 0
        dropped = len(part)
        self._ring.remove(topic)
        self._len -= dropped
        self._room_made((topic,))
        return dropped

    def clear(self) -> None:
        self._parts.clear()
        self._ring.clear()
        self._len = 0
        self._wake_all()

    def _wake_all(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_result(None)
