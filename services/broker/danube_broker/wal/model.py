"""Values the WAL hands out: log entries and stats."""

from __future__ import annotations

from dataclasses import dataclass


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
