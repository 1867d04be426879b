"""Values the WAL hands out: log entries and stats; what it reports as it works (to the broker's
metrics, once per commit, and to the trace of a batch with sampled messages)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
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


@dataclass(frozen=True, slots=True)
class CommitRound:
    """One log's group commit, as reported to a :data:`COMMIT_OBSERVER` (wall-clock nanoseconds;
    start and end are those of the scheduler's round)."""

    start_ns: int
    end_ns: int
    #: The fsync alone (0 with durability none).
    fsync_s: float
    #: Records, bytes and batches of this log's commit (every batch of the log that shared it).
    records: int
    bytes: int
    batches: int
    durability: str
    #: Logs (topics) whose commits shared the round's thread hop and fsync wave.
    logs: int = 1


#: Set by a caller of ``TopicLog.append``/``enqueue`` (in its context) to learn the commit round
#: that makes its batch durable: called on the event loop just before the batch's future
#: resolves. Read once per batch; unset (None) on the hot path. Tracing uses it for the ``wal
#: commit`` spans of sampled messages.
COMMIT_OBSERVER: contextvars.ContextVar[Callable[[CommitRound], None] | None] = contextvars.ContextVar(
    "danube_wal_commit_observer", default=None
)


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

    def history_deleted(self, segments: int, nbytes: int) -> None:
        """Retention deleted ``segments`` uploaded segments (``nbytes``) from object storage."""

    def compacted(self, seconds: float | None) -> None:
        """A topic was compacted in ``seconds`` (None: the compaction failed)."""
