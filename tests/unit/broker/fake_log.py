"""An in-memory TopicLog with the WAL's interface, for unit tests of reliable dispatch.

Faithful to what dispatch relies on:

- ``append`` assigns offsets synchronously (before its first await), in call order, and
  returns the first offset once the batch is durable. With ``auto_commit`` (default) a batch is
  durable at once; otherwise it stays pending until :meth:`commit` (group commit), so a test can
  see that nothing is acked or delivered before durability.
- ``fail_next(exc)`` makes the next append raise ``exc`` with nothing of its batch stored;
  ``read_failures`` are raised by the next disk reads (``read_async``).
- ``read`` serves a tail cache of the last ``cache_entries`` entries (None below it, [] when
  nothing new); ``read_async`` serves everything kept. Both may return non-durable entries:
  callers must stop at ``durable_offset``, as with the real WAL.
- ``last_sequence`` is the highest sequence id per producer name among records stored or being
  committed; a failed commit takes its ids back out (as the WAL does).
- ``truncate_before`` deletes whole segments of ``segment_entries`` entries below an offset.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from danube_broker.wal import DiskFull, Durability, LogClosed, StorageError, StorageFailed, WalStats

__all__ = ["DiskFull", "FakeLog", "FakeLogEntry", "FakeLogs", "StorageError", "StorageFailed"]


@dataclass(frozen=True, slots=True)
class FakeLogEntry:
    offset: int
    publish_time_ms: int
    record: bytes


class FakeLog:
    def __init__(
        self,
        *,
        auto_commit: bool = True,
        cache_entries: int = 1_000_000,
        segment_entries: int = 10,
        first_offset: int = 0,
    ) -> None:
        self.auto_commit = auto_commit
        self.cache_entries = cache_entries
        self.segment_entries = segment_entries
        self._base = first_offset  # offset of _entries[0]
        self._entries: list[FakeLogEntry] = []
        self._durable = first_offset
        self._seq_durable: dict[str, int] = {}
        self._seq_accepted: dict[str, int] = {}
        self._commit_waiters: list[tuple[int, int, asyncio.Future[int]]] = []
        self._durable_changed = asyncio.Event()
        self._fail: list[BaseException] = []
        self._failed_commits = 0
        self.read_failures: list[BaseException] = []
        self.appends = 0
        self.truncations: list[int] = []
        self.closed = False
        self._on_sealed: Callable[[], None] | None = None

    # ---- offsets
    @property
    def first_offset(self) -> int:
        return self._base

    @property
    def next_offset(self) -> int:
        return self._base + len(self._entries)

    @property
    def durable_offset(self) -> int:
        return self._durable

    # ---- writes
    def fail_next(self, exc: BaseException) -> None:
        self._fail.append(exc)

    async def append(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
    ) -> int:
        return await (await self.enqueue(records, publish_times_ms, sequences))

    async def enqueue(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
        *,
        unless_failed_since: int | None = None,
    ) -> asyncio.Future[int]:
        return self.enqueue_now(records, publish_times_ms, sequences, unless_failed_since=unless_failed_since)

    def has_room(self) -> bool:
        return True

    def enqueue_now(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
        *,
        unless_failed_since: int | None = None,
    ) -> asyncio.Future[int]:
        if self.closed:
            raise LogClosed("log closed")
        if self._fail:
            raise self._fail.pop(0)
        if unless_failed_since is not None and unless_failed_since != self._failed_commits:
            raise StorageFailed("a commit failed since: refused to keep the order")
        assert len(records) == len(publish_times_ms)
        first = self.next_offset
        for i, (rec, t) in enumerate(zip(records, publish_times_ms, strict=True)):
            self._entries.append(FakeLogEntry(first + i, int(t), bytes(rec)))
        self.appends += 1
        end = self.next_offset
        for name, seq in sequences or ():
            self._seq_accepted[name] = max(self._seq_accepted.get(name, 0), seq)
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self.auto_commit:
            self.commit()
            fut.set_result(first)
            return fut
        self._commit_waiters.append((end, first, fut))
        return fut

    def commit(self) -> None:
        """Make everything appended durable (one group commit). Crossing a segment boundary
        (``segment_entries``) seals the segment before it, as a roll does."""
        seg = self.segment_entries
        sealed = self._durable > self._base and (self.next_offset - 1) // seg > (self._durable - 1) // seg
        self._durable = self.next_offset
        self._seq_durable = dict(self._seq_accepted)
        waiters, self._commit_waiters = self._commit_waiters, []
        for _, first, fut in waiters:
            if not fut.done():
                fut.set_result(first)
        self._durable_changed.set()
        self._durable_changed = asyncio.Event()
        if sealed and self._on_sealed is not None:
            self._on_sealed()

    def on_sealed(self, callback: Callable[[], None] | None) -> None:
        self._on_sealed = callback

    @property
    def failed_commits(self) -> int:
        return self._failed_commits

    def fail_pending(self, exc: BaseException) -> None:
        """The pending group commit fails: its batches are removed and their appends raise."""
        self._failed_commits += 1
        keep = self._durable - self._base
        del self._entries[keep:]
        self._seq_accepted = dict(self._seq_durable)
        waiters, self._commit_waiters = self._commit_waiters, []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_exception(exc)

    def last_sequence(self, producer_name: str) -> int:
        return self._seq_accepted.get(producer_name, 0)

    def producer_sequences(self) -> dict[str, int]:
        return dict(self._seq_accepted)

    # ---- reads
    def read(self, from_offset: int, max_entries: int, max_bytes: int = 4 << 20) -> list[FakeLogEntry] | None:
        cache_start = max(self._base, self.next_offset - self.cache_entries)
        if from_offset < cache_start:
            return None
        return self._slice(from_offset, max_entries, max_bytes)

    async def read_async(
        self, from_offset: int, max_entries: int, max_bytes: int = 4 << 20
    ) -> list[FakeLogEntry]:
        await asyncio.sleep(0)
        return self._slice(max(from_offset, self._base), max_entries, max_bytes)

    def _slice(self, from_offset: int, max_entries: int, max_bytes: int) -> list[FakeLogEntry]:
        out: list[FakeLogEntry] = []
        size = 0
        for e in self._entries[from_offset - self._base : from_offset - self._base + max_entries]:
            if out and size + len(e.record) > max_bytes:
                break
            out.append(e)
            size += len(e.record)
        return out

    async def wait_for(self, offset: int) -> None:
        while self._durable <= offset:
            await self._durable_changed.wait()

    async def offset_for_time(self, publish_time_ms: int) -> int:
        times = [e.publish_time_ms for e in self._entries[: self._durable - self._base]]
        return self._base + bisect.bisect_left(times, publish_time_ms)

    async def truncate_before(self, offset: int) -> int:
        """Delete whole segments (``segment_entries`` each) below ``offset``; bytes freed.

        Like the WAL, the segment being written (the one holding ``next_offset``) is kept.
        """
        seg = self.segment_entries
        cut = min(offset, self._durable, (self.next_offset // seg) * seg)
        new_base = max(self._base, (cut // seg) * seg)
        if new_base <= self._base:
            return 0
        freed = sum(len(e.record) for e in self._entries[: new_base - self._base])
        del self._entries[: new_base - self._base]
        self._base = new_base
        self.truncations.append(new_base)
        return freed

    def segments(self) -> list[tuple[int, int]]:
        """(start offset, bytes) of every kept segment, oldest first."""
        seg = self.segment_entries
        out: dict[int, int] = {}
        for e in self._entries:
            start = (e.offset // seg) * seg
            out[start] = out.get(start, 0) + len(e.record)
        return sorted(out.items())

    @property
    def segment_count(self) -> int:
        return len(self.segments())

    def stats(self) -> WalStats:
        return WalStats(
            bytes_on_disk=sum(len(e.record) for e in self._entries),
            segments=len(self.segments()),
            first_offset=self.first_offset,
            next_offset=self.next_offset,
            durable_offset=self.durable_offset,
            appends=self.appends,
            records=self.next_offset - self.first_offset,
            commits=self.appends,
            failed_commits=0,
            commit_p50_ms=0.0,
            commit_p99_ms=0.0,
            fsync_p50_ms=0.0,
            fsync_p99_ms=0.0,
            cache_entries=0,
            cache_bytes=0,
        )

    async def aclose(self) -> None:
        self.closed = True


class FakeLogs:
    """An ``open_log`` for the registry: one FakeLog per directory, kept across close/reopen
    (like files on disk); ``opened`` records (directory, durability) per open."""

    def __init__(self, **log_options: object) -> None:
        self.logs: dict[Path, FakeLog] = {}
        self.opened: list[tuple[Path, Durability]] = []
        self._options = log_options

    async def __call__(self, directory: Path, durability: Durability, initial_offset: int = 0) -> FakeLog:
        self.opened.append((directory, durability))
        log = self.logs.get(directory)
        if log is None:
            options = {"first_offset": initial_offset, **self._options}
            log = self.logs[directory] = FakeLog(**options)  # type: ignore[arg-type]
        log.closed = False
        return log
