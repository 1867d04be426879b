"""The WAL's configuration and durability policy."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from danube_broker.wal.syncfs import CommitSync

MIB = 1024 * 1024


class Durability(StrEnum):
    """When an appended batch counts as stored (and its producer may be acked)."""

    #: After the batch's group commit is fsync'ed (fdatasync) to the local disk.
    FSYNC = "fsync"
    #: After the batch is written to the OS (page cache); a machine crash can lose the last
    #: few commits, a process crash cannot. Nothing is ever fsync'ed, not even at roll.
    NONE = "none"
    #: Locally exactly like FSYNC; the broker then acks only once the batch is in object storage
    #: (``danube_broker.cloud``; without a WAL uploader configured, like FSYNC).
    CLOUD = "cloud"

    @property
    def syncs(self) -> bool:
        return self is not Durability.NONE


class WalConfig(BaseModel):
    """Per-topic WAL settings (one instance is shared by every topic of a broker)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: A segment is sealed (and a new one started) before a commit would take it past this size.
    #: A single commit bigger than this still goes into one segment.
    segment_max_bytes: int = Field(default=64 * MIB, gt=0)
    #: ... or before the first commit once the segment is this old (checked only when writing:
    #: an idle segment is not sealed by a timer; call ``TopicLog.roll()`` for that).
    segment_max_age_s: float = Field(default=3600.0, gt=0)
    #: Per-topic cap of the in-memory tail cache: record bytes plus 64 bytes per entry of
    #: object overhead. 0 disables the cache (every read goes to disk through ``read_async``).
    tail_cache_bytes: int = Field(default=64 * MIB, ge=0)
    #: Cap of all topics' tail caches together (the broker's commit scheduler applies it): over
    #: it, the largest caches give back their oldest records first, down to 90%. Without it a
    #: few busy topics hold ``tail_cache_bytes`` each (16 partitions: 1 GiB). 0: no such cap.
    tail_cache_total_bytes: int = Field(default=512 * MIB, ge=0)
    #: One commit (one write + one fsync) takes whole batches up to this many frame bytes
    #: (a single bigger batch is committed alone).
    max_batch_bytes_per_commit: int = Field(default=8 * MIB, gt=0)
    #: The sparse index has one (offset, byte position) entry every this many frames.
    index_every_frames: int = Field(default=256, gt=0)
    #: Back-pressure: ``append`` waits while this many frame bytes are queued and not yet
    #: committed.
    max_pending_bytes: int = Field(default=64 * MIB, gt=0)
    #: ``open`` waits this long for the directory lock held by another open log of the same
    #: topic (e.g. the previous owner on this broker, still closing) before failing.
    lock_wait_s: float = Field(default=5.0, ge=0)
    #: With durability "none" only: commits up to this many bytes are written on the event loop
    #: instead of the thread pool (a page-cache write takes microseconds, the thread hop
    #: 100-150 us here: ~10x the appends/s of one appender). 0 (default): the writes of ``none``
    #: logs go to the thread pool (those of syncing logs: ``round_loop_write_bytes``).
    inline_write_max_bytes: int = Field(default=0, ge=0, le=1024 * 1024)
    #: One commit scheduler for every topic of the broker (``CommitGroup``): a round commits
    #: the queued appends of all topics with one thread hop, their fdatasyncs spread over
    #: ``commit_fsync_threads`` threads. false: each topic has its own writer (one thread hop
    #: and one fsync per topic per round), as before; kept for comparison.
    shared_commit: bool = True
    #: Cap of one shared round's frame bytes over all topics (each topic's share is also
    #: capped by ``max_batch_bytes_per_commit``); the rest waits for the next round.
    max_round_bytes: int = Field(default=32 * MIB, gt=0)
    #: Threads a shared round's fdatasyncs are spread over (ext4 merges concurrent ones into
    #: one journal commit: bench/wal_multi_fsync.py). Used with ``commit_sync`` files.
    commit_fsync_threads: int = Field(default=16, gt=0, le=256)
    #: A shared round writes up to this many frame bytes on the event loop (page-cache writes
    #: to open, clean segment files: microseconds each) and only flushes in a worker thread.
    #: Written in the thread instead, each topic's write waits for the GIL after its system
    #: call while the loop runs Python, so rounds of many topics grew with their number.
    #: 0: every write in the thread (no disk call on the loop at all).
    round_loop_write_bytes: int = Field(default=1 * MIB, ge=0, le=64 * MIB)
    #: How a shared round is made durable: "filesystem" = one syncfs per file system for all
    #: its topics (Linux >= 5.8, where syncfs reports write-back errors; it also flushes any
    #: other program's dirty data on that file system: give the WAL a volume of its own);
    #: "files" = one fdatasync per topic file; "auto" = filesystem where supported, else files;
    #: "journal" = one append + fdatasync of the broker's commit journal
    #: (``<data_dir>/.journal/``), the topic files flushed in bulk by checkpoints and the
    #: journal replayed into them at start (needs ``shared_commit``).
    commit_sync: CommitSync = CommitSync.AUTO
    #: commit_sync journal: a checkpoint (topic files flushed, older journal files deleted) is
    #: started when the current journal file is this long ...
    journal_max_bytes: int = Field(default=64 * MIB, gt=0)
    #: ... or this old, whichever comes first (bounds the replay after a power loss).
    journal_checkpoint_s: float = Field(default=5.0, gt=0)
    #: A topic whose log was not written for this long has its active segment's file closed
    #: (opened again by the next write), so an idle topic holds one fd (its directory lock)
    #: instead of two. 0: never closed.
    idle_fd_close_s: float = Field(default=60.0, ge=0)
    #: At most this many topics' active segment files open at once (beyond it the least recently
    #: written one is closed, whatever its age: topics loaded in a burst). 0: a quarter of the
    #: broker's open-file limit (as raised at start). Needs ``idle_fd_close_s`` > 0.
    max_open_segment_files: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _journal_needs_shared_commit(self) -> WalConfig:
        if self.commit_sync is CommitSync.JOURNAL and not self.shared_commit:
            raise ValueError("wal.commit_sync journal needs wal.shared_commit true (one journal per broker)")
        return self
