"""What reliable dispatch needs from a topic's write-ahead log (``danube_broker.wal.TopicLog``).

Written as a Protocol so dispatch depends on behaviour rather than on the WAL's internals: the
real ``TopicLog`` and the unit tests' in-memory fake (tests/unit/broker/fake_log.py) both
satisfy it.

Offsets: ``first_offset`` is the oldest kept, ``next_offset`` the next to be assigned,
``durable_offset`` the end of what is durable. Only offsets below ``durable_offset`` are ever
delivered to consumers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from danube_broker.wal import WalStats


class Entry(Protocol):
    @property
    def offset(self) -> int: ...

    @property
    def publish_time_ms(self) -> int: ...

    @property
    def record(self) -> bytes: ...


class TopicLogPort(Protocol):
    @property
    def first_offset(self) -> int: ...

    @property
    def next_offset(self) -> int: ...

    @property
    def durable_offset(self) -> int: ...

    @property
    def failed_commits(self) -> int:
        """How many group commits failed so far (a counter that only grows)."""
        ...

    async def append(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
    ) -> int:
        """Store ``records``; return the first offset once durable (StorageError: nothing stored)."""
        ...

    async def enqueue(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
        *,
        unless_failed_since: int | None = None,
    ) -> asyncio.Future[int]:
        """Take offsets for ``records`` (after waiting for room) and queue them; the future gives
        the first offset once durable. ``append`` = ``await (await enqueue(...))``.
        ``unless_failed_since``: refuse (StorageFailed) if ``failed_commits`` moved past it."""
        ...

    def has_room(self) -> bool:
        """``enqueue`` would not wait for room now."""
        ...

    def enqueue_now(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
        *,
        unless_failed_since: int | None = None,
    ) -> asyncio.Future[int]:
        """``enqueue`` without waiting for room (the caller looked at ``has_room``)."""
        ...

    def last_sequence(self, producer_name: str) -> int: ...

    def producer_sequences(self) -> dict[str, int]:
        """Every producer name's ``last_sequence`` (carried to the topic's next owner)."""
        ...

    def read(self, from_offset: int, max_entries: int, max_bytes: int = ...) -> Sequence[Entry] | None:
        """From the tail cache: entries, [] if nothing new, None if older than the cache."""
        ...

    async def read_async(self, from_offset: int, max_entries: int, max_bytes: int = ...) -> Sequence[Entry]:
        """From disk (replay); ``from_offset`` below ``first_offset`` starts at ``first_offset``."""
        ...

    async def wait_for(self, offset: int) -> None: ...

    async def offset_for_time(self, publish_time_ms: int) -> int:
        """The first offset published at or after ``publish_time_ms`` (durable_offset: none)."""
        ...

    async def truncate_before(self, offset: int) -> int:
        """Delete whole sealed segments below ``offset``; return the bytes freed."""
        ...

    def stats(self) -> WalStats: ...

    @property
    def segment_count(self) -> int:
        """Segments on disk (sealed and active), without a stats snapshot."""
        ...

    def on_sealed(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (on the event loop, nothing awaited) each time a segment is sealed:
        retention may cut it from then on. None: no callback."""
        ...

    async def aclose(self) -> None: ...


class CompactedViewPort(Protocol):
    """A topic's compacted view (``danube_broker.compaction.CompactedView``)."""

    @property
    def horizon(self) -> int:
        """Offsets below it are compacted: only the view's entries remain there."""
        ...

    @property
    def first_offset(self) -> int:
        """The oldest entry's offset (the horizon when the view is empty)."""
        ...

    def read(self, from_offset: int, max_entries: int) -> Sequence[Entry]:
        """Entries at or above ``from_offset`` (below the horizon), oldest first."""
        ...


class CompactedSource(Protocol):
    """Where dispatch finds the topic's current view (``danube_broker.compaction.TopicCompaction``)."""

    @property
    def view(self) -> CompactedViewPort | None: ...
