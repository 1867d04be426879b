"""Values the WAL hands out: log entries and stats; what it reports as it works."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class LogEntry:
    offset: int
    publish_time_ms: int
    #: The stored record (an encoded danube.StreamMessage; opaque to the WAL).
    record: bytes


@dataclass(frozen=True, slots=True)
class WalStats:
    bytes_on_disk: int
    segments: int
    first_offset: int
    next_offset: int
    durable_offset: int
    #: append() calls that were acked, and the records they carried.
    appends: int
    records: int
    #: Successful group commits (one write + at most one fsync each) and failed ones.
    commits: int
    failed_commits: int
    #: Commit latency (write + fsync, as seen by the writer) over the last 1024 commits.
    commit_p50_ms: float
    commit_p99_ms: float
    #: fsync (fdatasync) latency alone over the last 1024 commits (0 with durability none).
    fsync_p50_ms: float
    fsync_p99_ms: float
    cache_entries: int
    cache_bytes: int


class WalObserver(Protocol):
    """Told about a log's work as it happens, on the event loop: once per group commit and per
    segment sealed, never per record (the broker's metrics)."""

    def committed(self, records: int, nbytes: int, fsync_s: float | None) -> None:
        """A group commit stored ``records`` records in ``nbytes`` frame bytes; ``fsync_s``:
        its fsync's duration (None with durability none)."""

    def commit_failed(self) -> None:
        """A group commit failed (its batches and those queued behind it were refused)."""

    def rotated(self) -> None:
        """The active segment was sealed and a new one started."""
