"""A reliable topic's log as dispatch sees it: object storage, then the local WAL.

:class:`TieredLog` wraps the topic's :class:`~danube_broker.wal.TopicLog` (or anything with its
interface) and its :class:`~danube_broker.wal.remote.RemoteHistory`. Appends, durability, the
tail cache and retention are the local log's; reads go, in order, to

1. the local tail cache (``read``, synchronous: the live tail);
2. the local segment files (``read_async`` at or above the local ``first_offset``);
3. object storage (``read_async`` below it), one object per call, never past the local
   ``first_offset``: the next call continues in the local log, so a replay is handed to the
   local log and its live tail without a gap or a duplicate.

``first_offset`` is the oldest offset of either (object storage's first descriptor, when there
is one), so new ``earliest`` subscriptions, seeks and stats see the whole history. An offset
between the two that neither holds raises :class:`~danube_broker.wal.errors.HistoryGap`; it is
never skipped, unless an operator's recorded decision declared it lost (an accepted gap of an
unclean takeover): reads then continue after it, and subscriptions count what they skipped. If local retention deletes the segment a read was about to use, the read starts
again from object storage (retention only deletes what the uploader's checkpoint covers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from danube_broker.wal.errors import HistoryGap
from danube_broker.wal.log import DEFAULT_READ_BYTES
from danube_broker.wal.model import LogEntry, WalStats
from danube_broker.wal.remote import RemoteHistory

if TYPE_CHECKING:
    from danube_broker.dispatch.reliable.log_port import Entry, TopicLogPort


class TieredLog:
    def __init__(self, local: TopicLogPort, history: RemoteHistory, *, floor: int | None = None) -> None:
        self.local = local
        self.history = history
        #: The history starts at or below this even if object storage does not say so yet: the
        #: previous owner's tail may still be on its way there (its uploader records the log's
        #: end first, then uploads). Reads of those offsets stall until they arrive, never skip.
        #: Dropped once object storage holds everything below it (from then on retention may
        #: delete the oldest objects, and the first offset follows).
        self.floor = floor

    # ------------------------------------------------------------------ offsets
    @property
    def first_offset(self) -> int:
        """The oldest offset kept anywhere (object storage first, or what is on its way there)."""
        first = self.local.first_offset
        remote_first = self.history.first_offset
        if remote_first is not None:
            first = min(first, remote_first)
        floor = self.floor
        if floor is not None:
            end = self.history.end_offset
            if end is not None and end >= floor:
                self.floor = None  # arrived: object storage's first offset says the rest
            else:
                first = min(first, floor)
        return first

    @property
    def next_offset(self) -> int:
        return self.local.next_offset

    @property
    def durable_offset(self) -> int:
        return self.local.durable_offset

    @property
    def failed_commits(self) -> int:
        return self.local.failed_commits

    def last_sequence(self, producer_name: str) -> int:
        return self.local.last_sequence(producer_name)

    def producer_sequences(self) -> dict[str, int]:
        return self.local.producer_sequences()

    # ------------------------------------------------------------------ writes (local)
    async def append(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
    ) -> int:
        return await self.local.append(records, publish_times_ms, sequences)

    async def enqueue(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
        *,
        unless_failed_since: int | None = None,
    ) -> asyncio.Future[int]:
        return await self.local.enqueue(
            records, publish_times_ms, sequences, unless_failed_since=unless_failed_since
        )

    def has_room(self) -> bool:
        return self.local.has_room()

    def enqueue_now(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
        *,
        unless_failed_since: int | None = None,
    ) -> asyncio.Future[int]:
        return self.local.enqueue_now(
            records, publish_times_ms, sequences, unless_failed_since=unless_failed_since
        )

    async def wait_for(self, offset: int) -> None:
        await self.local.wait_for(offset)

    async def truncate_before(self, offset: int) -> int:
        return await self.local.truncate_before(offset)

    # ------------------------------------------------------------------ reads
    def read(
        self, from_offset: int, max_entries: int, max_bytes: int = DEFAULT_READ_BYTES
    ) -> Sequence[Entry] | None:
        return self.local.read(from_offset, max_entries, max_bytes)

    async def read_async(
        self, from_offset: int, max_entries: int, max_bytes: int = DEFAULT_READ_BYTES
    ) -> Sequence[Entry]:
        """Entries from ``from_offset`` (offsets below ``first_offset`` are skipped, as in the
        WAL): from the local log at or above its first offset, else from object storage (up to
        the local first offset at most). HistoryGap for an offset neither holds."""
        from_offset = self.history.past_gaps(max(from_offset, self.first_offset))
        while True:
            local_first = self.local.first_offset
            if from_offset >= local_first:
                entries = await self.local.read_async(from_offset, max_entries, max_bytes)
                if not entries or entries[0].offset == from_offset or self.history.first_offset is None:
                    return entries
                if self.local.first_offset <= from_offset:
                    raise HistoryGap(
                        f"the local log of topic {self.history.topic} skipped from offset {from_offset} to "
                        f"{entries[0].offset} while it starts at {self.local.first_offset}"
                    )
                # Retention deleted the segment meanwhile: those offsets are in object storage.
                continue
            remote: list[LogEntry] = await self.history.read(
                from_offset, min(max_entries, local_first - from_offset), max_bytes, local_first=local_first
            )
            return remote

    async def offset_for_time(self, publish_time_ms: int) -> int:
        local_first = self.local.first_offset
        found = await self.local.offset_for_time(publish_time_ms)
        remote_first = self.history.first_offset
        if remote_first is None or remote_first >= local_first:
            return found
        earlier = await self.history.offset_for_time(publish_time_ms, before=local_first)
        return found if earlier is None else earlier

    # ------------------------------------------------------------------ stats, close
    def stats(self) -> WalStats:
        """The local WAL's figures (``RemoteHistory.stats`` has object storage's)."""
        return self.local.stats()

    @property
    def segment_count(self) -> int:
        return self.local.segment_count

    def on_sealed(self, callback: Callable[[], None] | None) -> None:
        self.local.on_sealed(callback)

    async def aclose(self) -> None:
        await self.local.aclose()
