"""TopicLog: one topic's write-ahead log (append with group commit, reads, retention).

Threading: all state lives on the event loop; blocking disk work (write + fsync, roll, reads of
segment files, recovery, deletes) runs in a thread pool. A commit scheduler (``CommitGroup``:
the broker's shared one, else a private one per log) takes every batch queued while the
previous round ran and writes them with one write and one fsync per log, one thread hop per
round for all its logs.
See README.md in this package for the format, the crash analysis and failure behaviour.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from danube_broker.wal.cache import TailCache
from danube_broker.wal.config import Durability, WalConfig
from danube_broker.wal.errors import DiskFull, LogClosed, StorageError, StorageFailed, storage_error
from danube_broker.wal.group import CommitGroup, CommitJob
from danube_broker.wal.model import COMMIT_OBSERVER, CommitRound, LogEntry, WalObserver, WalStats
from danube_broker.wal.recovery import Recovered
from danube_broker.wal.segments import DiskOps, merge_sequences
from danube_broker.wal.store import SegmentStore, recover_directory
from danube_common.errors import CorruptData, MessageTooLarge
from danube_common.wal.codec import FRAME_HEADER_BYTES, MAX_FRAME_BYTES, encode_frames

log = logging.getLogger(__name__)

#: Default ``max_bytes`` of a read.
DEFAULT_READ_BYTES = 4 * 1024 * 1024
_LATENCY_WINDOW = 1024
#: The largest record a frame can carry (a longer length field is read as damage).
MAX_RECORD_BYTES = MAX_FRAME_BYTES - (FRAME_HEADER_BYTES - 8)

_default_executor: ThreadPoolExecutor | None = None
_default_executor_lock = threading.Lock()


def default_executor() -> ThreadPoolExecutor:
    """The process-wide pool for WAL disk work (used when ``TopicLog.open`` gets none)."""
    global _default_executor
    with _default_executor_lock:
        if _default_executor is None:
            _default_executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="danube-wal")
        return _default_executor


@dataclass(slots=True, eq=False)
class _Batch:
    first: int
    data: bytes  # the encoded frames
    records: list[bytes]
    pts: list[int]
    sizes: list[int]  # record lengths
    seqs: dict[str, int] | None  # highest sequence id per producer in this batch
    fut: asyncio.Future[int]
    #: Told of the commit round that made the batch durable (COMMIT_OBSERVER of the caller).
    observer: Callable[[CommitRound], None] | None = None


def _percentile_ms(samples: deque[float] | None, q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0


class TopicLog:
    """Use ``await TopicLog.open(...)``; close with ``await log.aclose()``."""

    #: Slots, not an instance dict: one log per loaded topic (~1 KB less each).
    __slots__ = (
        "__weakref__",
        "_advanced",
        "_appends",
        "_broken",
        "_cache",
        "_cfg",
        "_closed",
        "_closing",
        "_commit_s",
        "_commits",
        "_committing",
        "_disk_full",
        "_durability",
        "_durable_offset",
        "_failed_commits",
        "_fsync_s",
        "_group",
        "_job",
        "_latency_ms",
        "_loop",
        "_next_offset",
        "_observer",
        "_on_sealed",
        "_own_group",
        "_pending_bytes",
        "_queue",
        "_records",
        "_roll_requests",
        "_round_over",
        "_seq_accepted",
        "_seq_durable",
        "_space",
        "_store",
        "_sync",
        "directory",
    )

    def __init__(
        self,
        directory: Path,
        rec: Recovered,
        *,
        cfg: WalConfig,
        durability: Durability,
        executor: ThreadPoolExecutor,
        ops: DiskOps,
        observer: WalObserver | None = None,
        group: CommitGroup | None = None,
    ) -> None:
        self.directory = directory
        #: The loop of the first append (asyncio.get_running_loop() is a getpid() system call per
        #: call on CPython 3.11; a log lives on one loop).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._observer = observer
        self._on_sealed: Callable[[], None] | None = None
        self._cfg = cfg
        self._durability = durability
        self._sync = durability.syncs
        self._store = SegmentStore(
            directory,
            rec.sealed,
            rec.active,
            lock_fd=rec.lock_fd,
            cfg=cfg,
            ops=ops,
            sync=self._sync,
            executor=executor,
        )
        nxt = rec.active.index.next_offset
        self._next_offset = nxt
        self._durable_offset = nxt
        self._cache = TailCache(
            cfg.tail_cache_bytes,
            nxt - len(rec.tail_frames),
            group.cache_budget if group is not None else None,
        )
        if rec.tail_frames:
            recs = [f.record for f in rec.tail_frames]
            pts = [f.publish_time_ms for f in rec.tail_frames]
            self._cache.extend(rec.tail_frames[0].offset, recs, pts, list(map(len, recs)))
        self._seq_durable = rec.producer_sequences
        self._seq_accepted = dict(rec.producer_sequences)

        #: Batches waiting for a commit round (made at the first append: an idle log holds none).
        self._queue: deque[_Batch] | None = None
        self._roll_requests: list[asyncio.Future[bool]] = []
        self._pending_bytes = 0
        # Events made only when someone waits (an idle log holds none: ~700 bytes each), and
        # replaced by a fresh one each time they fire: a round served this log, durable_offset
        # moved, pending bytes shrank.
        self._round_over: asyncio.Event | None = None
        self._job: CommitJob | None = None  # this log's part of the round running now
        self._advanced: asyncio.Event | None = None
        self._space: asyncio.Event | None = None
        self._committing = False
        self._disk_full = False
        self._closing = False
        self._closed = False
        self._broken: StorageError | None = None

        self._appends = 0
        self._records = 0
        self._commits = 0
        self._failed_commits = 0
        #: Latency windows, made at the first commit (a log never written holds none), and
        #: their (commit p50, p99, fsync p50, p99) in ms, computed once per change (stats()
        #: is read by every retention sweep: an idle log does not sort its windows again).
        self._commit_s: deque[float] | None = None
        self._fsync_s: deque[float] | None = None
        self._latency_ms: tuple[float, float, float, float] | None = None
        #: Without a shared group, a private one: one log per round (a per-log writer task).
        self._own_group = group is None
        self._group = group or CommitGroup(
            executor, fsync_threads=1, name=f"wal-writer:{directory}", idle_close_s=cfg.idle_fd_close_s
        )
        self._group.used(self)

    @classmethod
    async def open(
        cls,
        directory: Path,
        *,
        cfg: WalConfig,
        durability: Durability,
        executor: ThreadPoolExecutor | None = None,
        ops: DiskOps | None = None,
        initial_offset: int = 0,
        observer: WalObserver | None = None,
        group: CommitGroup | None = None,
    ) -> TopicLog:
        """Open (creating it if needed) the log in ``directory`` and recover it. Holds the
        directory's lock (``wal.lock``) until ``aclose``: waits up to ``cfg.lock_wait_s`` for
        another open log of the same directory to close, then raises StorageFailed.

        ``initial_offset`` is where an empty directory starts (a topic moved here resumes at
        the previous owner's last offset + 1); ignored when segments exist. ``ops`` replaces
        the OS calls (tests). ``observer`` is told of every commit and roll (metrics).
        ``group``: the broker's commit scheduler shared by its logs (None: a private one)."""
        directory = Path(directory)
        executor = executor or default_executor()
        ops = ops or DiskOps()
        rec = await recover_directory(
            directory,
            cfg=cfg,
            ops=ops,
            sync=durability.syncs,
            initial_offset=initial_offset,
            executor=executor,
        )
        return cls(
            directory,
            rec,
            cfg=cfg,
            durability=durability,
            executor=executor,
            ops=ops,
            observer=observer,
            group=group,
        )

    # ------------------------------------------------------------ offsets

    @property
    def first_offset(self) -> int:
        """Oldest offset still stored (== next_offset when the log is empty)."""
        return self._store.first_offset

    @property
    def next_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._next_offset

    @property
    def durable_offset(self) -> int:
        """Every offset below this one is stored per the durability policy (and readable)."""
        return self._durable_offset

    @property
    def durability(self) -> Durability:
        return self._durability

    @property
    def segment_count(self) -> int:
        """Segments on disk: the sealed ones and the active one (cheap; no stats snapshot)."""
        return self._store.segment_count

    def on_sealed(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (event loop, after the roll is accounted) each time a segment is
        sealed. It must not raise: an exception counts as a bug of this log."""
        self._on_sealed = callback

    @property
    def failed_commits(self) -> int:
        """Commits that failed so far (each failed its batches and every batch queued behind)."""
        return self._failed_commits

    def last_sequence(self, producer_name: str) -> int:
        """Highest sequence id of ``producer_name`` among records stored or being committed (0:
        none). A failed commit takes its records' ids back out; after a restart it is exact for
        what the log holds."""
        return self._seq_accepted.get(producer_name, 0)

    def producer_sequences(self) -> dict[str, int]:
        """A copy of every producer's :meth:`last_sequence`."""
        return dict(self._seq_accepted)

    # ------------------------------------------------------------ append

    async def append(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
    ) -> int:
        """Store ``records`` at consecutive offsets; returns the first once they are durable.

        Offsets are assigned at the call, in call order. Raises DiskFull / StorageFailed when the
        commit failed (nothing of it was stored; the offsets are reused), LogClosed after
        ``aclose``. Cancelling the caller does not withdraw the records. An empty call returns
        ``next_offset`` at once."""
        return await (await self.enqueue(records, publish_times_ms, sequences))

    async def enqueue(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
        *,
        unless_failed_since: int | None = None,
    ) -> asyncio.Future[int]:
        """The first half of :meth:`append`: wait for room (back-pressure), take the offsets and
        queue the batch for the writer; return the future of its first offset, resolved once
        durable (or failed with the commit). A caller that must keep several batches in order
        (one publish stream) awaits this in order and the futures concurrently.

        ``unless_failed_since``: refuse the batch (StorageFailed) if a commit failed since
        :attr:`failed_commits` was this value, checked at the moment the batch would be queued
        (an earlier batch of the caller may have failed with it: this one must not overtake it)."""
        self._check_writable()
        while self._pending_bytes >= self._cfg.max_pending_bytes and records:
            if self._space is None:
                self._space = asyncio.Event()
            await self._space.wait()
            self._check_writable()
        return self.enqueue_now(records, publish_times_ms, sequences, unless_failed_since=unless_failed_since)

    def has_room(self) -> bool:
        """:meth:`enqueue` would not wait for room now (back-pressure: ``max_pending_bytes``)."""
        return self._pending_bytes < self._cfg.max_pending_bytes

    def enqueue_now(
        self,
        records: Sequence[bytes],
        publish_times_ms: Sequence[int],
        sequences: Sequence[tuple[str, int]] | None = None,
        *,
        unless_failed_since: int | None = None,
    ) -> asyncio.Future[int]:
        """:meth:`enqueue` without waiting for room (the caller looked at :meth:`has_room`):
        the same checks, offsets and future."""
        n = len(records)
        if len(publish_times_ms) != n or (sequences is not None and len(sequences) != n):
            raise ValueError("records, publish_times_ms and sequences must have the same length")
        self._check_writable()
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if n == 0:
            done: asyncio.Future[int] = loop.create_future()
            done.set_result(self._next_offset)
            return done
        if self._disk_full and self._committing:
            raise DiskFull(f"WAL {self.directory}: disk full (a retry write is in progress)")
        if unless_failed_since is not None and self._failed_commits != unless_failed_since:
            raise StorageFailed(
                f"WAL {self.directory}: a commit failed after an earlier batch of this caller was queued; "
                "refused to keep the order"
            )

        recs = list(records)
        sizes = list(map(len, recs))
        if max(sizes) > MAX_RECORD_BYTES:
            raise MessageTooLarge(f"a WAL record is at most {MAX_RECORD_BYTES} bytes, got {max(sizes)}")
        pts = list(publish_times_ms)
        seqs: dict[str, int] | None = None
        if sequences:
            seqs = {}
            for name, seq in sequences:
                if seq > seqs.get(name, 0):
                    seqs[name] = seq
        # Everything that can raise (encoding: records must be bytes) comes before the offsets
        # are taken, so a bad call never leaves a gap. No await from here to the queue.
        first = self._next_offset
        data = encode_frames(first, recs, pts)
        self._next_offset = first + n
        if seqs:
            merge_sequences(self._seq_accepted, seqs)
        fut: asyncio.Future[int] = loop.create_future()
        if self._queue is None:
            self._queue = deque()
        self._queue.append(_Batch(first, data, recs, pts, sizes, seqs, fut, COMMIT_OBSERVER.get()))
        self._pending_bytes += len(data)
        self._group.notify(self)
        return fut

    def _check_writable(self) -> None:
        if self._closing:
            raise LogClosed(f"WAL {self.directory} is closed")
        if self._broken is not None:
            raise StorageFailed(self._broken.message)
        if self._group.closed:
            raise LogClosed(f"WAL {self.directory}: its commit scheduler is closed")

    # ------------------------------------------------------------ the writer (group commit)

    def has_work(self) -> bool:
        """Batches queued or a roll asked for (the scheduler serves this log in a round)."""
        return bool(self._queue or self._roll_requests)

    def next_commit_bytes(self) -> int:
        """Bytes the smallest possible share of this log in a round takes (its next batch)."""
        if self._roll_requests or not self._queue:
            return 0
        return len(self._queue[0].data)

    def prepare_commit(self, budget_bytes: int | None) -> CommitJob | None:
        """The scheduler takes this log's share of a round (event loop): a requested roll, or
        whole batches up to max_batch_bytes_per_commit and ``budget_bytes`` (at least one)."""
        if self._roll_requests:
            requests, self._roll_requests = self._roll_requests, []
            if self._store.active.frames:
                self._job = CommitJob(self, self._store, [], b"", self._sync, True, requests)
                return self._job
            for fut in requests:  # nothing to seal
                if not fut.done():
                    fut.set_result(False)
        q = self._queue
        if not q:
            return None
        cap = self._cfg.max_batch_bytes_per_commit
        if budget_bytes is not None:
            cap = min(cap, budget_bytes)
        # No more than the segment has room for (after a roll: a whole segment), so that a burst
        # queued at once still ends up in segments near segment_max_bytes, sealed as they fill
        # (uploads and retention work on sealed segments only). The first batch always goes.
        first = len(q[0].data)
        room = self._cfg.segment_max_bytes
        if not self._store.roll_due(first):
            room -= self._store.active.size
        cap = min(cap, max(room, first))
        b = q.popleft()
        batches, total = [b], len(b.data)
        while q and total + len(q[0].data) <= cap:
            b = q.popleft()
            batches.append(b)
            total += len(b.data)
        data = batches[0].data if len(batches) == 1 else b"".join([b.data for b in batches])
        self._committing = True
        self._job = CommitJob(self, self._store, batches, data, self._sync, self._store.roll_due(len(data)))
        return self._job

    def finish_commit(self, job: CommitJob, start_ns: int, end_ns: int, seconds: float, logs: int) -> None:
        """The round that ran ``job`` is over (event loop): account a roll, then complete or
        fail this log's batches. Raises only on a bug (the scheduler then calls crashed)."""
        self._job = None
        self._committing = False
        if job.rolled is not None:
            self._store.adopt(*job.rolled)
            if self._observer is not None:
                self._observer.rotated()
            if self._on_sealed is not None:
                self._on_sealed()
        if job.bug is not None:
            raise job.bug
        if job.is_roll:
            err = job.error
            for fut in job.roll_requests:
                if fut.done():
                    continue
                if err is not None:
                    fut.set_exception(
                        storage_error(err, f"WAL {self.directory}: sealing {self._store.active.path.name}")
                    )
                else:
                    fut.set_result(True)
            return
        batches = job.batches
        if job.error is not None:
            end = batches[-1].first + len(batches[-1].pts) - 1
            what = f"WAL {self.directory}: committing offsets {batches[0].first}..{end}"
            self._fail_commit(batches, storage_error(job.error, what))
            return
        seg = job.seg
        assert seg is not None
        data_len = len(job.data)
        fsync_s = job.fsync_s
        pos = seg.size
        seg.size = pos + data_len
        cache = self._cache
        for b in batches:
            seg.note_batch(pos, b.first, b.pts, b.sizes)
            pos += len(b.data)
            if b.seqs:
                merge_sequences(seg.index.producer_sequences, b.seqs)
                merge_sequences(self._seq_durable, b.seqs)
            cache.extend(b.first, b.records, b.pts, b.sizes)
        last = batches[-1]
        self._durable_offset = last.first + len(last.pts)
        self._disk_full = False
        self._pending_bytes -= data_len
        self._commits += 1
        self._appends += len(batches)
        self._records += self._durable_offset - batches[0].first
        self._latency_ms = None
        if self._commit_s is None:
            self._commit_s = deque(maxlen=_LATENCY_WINDOW)
        self._commit_s.append(seconds)
        if self._sync:
            if self._fsync_s is None:
                self._fsync_s = deque(maxlen=_LATENCY_WINDOW)
            self._fsync_s.append(fsync_s)
        if self._observer is not None:
            self._observer.committed(
                self._durable_offset - batches[0].first, data_len, fsync_s if self._sync else None
            )
        observed = [b.observer for b in batches if b.observer is not None]
        if observed:
            rnd = CommitRound(
                start_ns,
                end_ns,
                fsync_s if self._sync else 0.0,
                self._durable_offset - batches[0].first,
                data_len,
                len(batches),
                self._durability.value,
                logs,
            )
            for observer in observed:
                try:
                    observer(rnd)
                except Exception:  # an observer must never stop the log
                    log.exception("WAL %s: a commit observer failed", self.directory)
        for b in batches:
            if not b.fut.done():
                b.fut.set_result(b.first)
        self._signal_advanced()
        self._signal_space()

    def crashed(self, exc: BaseException, inflight: list[_Batch]) -> None:
        """A bug while serving this log (or in the scheduler): fail ``inflight``, the queue and
        the roll requests; refuse appends from now on (reads keep working). Loud."""
        log.error(
            "WAL %s: the writer crashed; the log refuses appends from now on", self.directory, exc_info=exc
        )
        self._job = None
        self._committing = False
        self._broken = StorageFailed(f"WAL {self.directory}: writer crashed ({exc!r})")
        self._fail_commit(inflight, self._broken)
        for fut in self._roll_requests:
            if not fut.done():
                fut.set_exception(StorageFailed(self._broken.message))
        self._roll_requests.clear()
        self._signal_advanced()
        self.round_done()

    def close_idle_file(self) -> bool:
        """The scheduler found this log idle (event loop, out of any round): close its active
        segment's fd until the next write. False if there is work or it is closed already."""
        if self._closed or self._job is not None or self.has_work():
            return False
        return self._store.active.close_idle()

    def round_done(self) -> None:
        """The scheduler is done with this log for now (wakes ``aclose``)."""
        ev, self._round_over = self._round_over, None
        if ev is not None:
            ev.set()

    def _fail_commit(self, batches: list[_Batch], err: StorageError | LogClosed) -> None:
        """Fail this commit and everything queued behind it; the log stays at durable_offset."""
        failed = [*batches, *(self._queue or ())]
        self._queue = None
        self._next_offset = self._durable_offset
        self._pending_bytes = 0
        self._seq_accepted = dict(self._seq_durable)
        self._disk_full = isinstance(err, DiskFull)
        if failed:
            self._failed_commits += 1
            if self._observer is not None:
                self._observer.commit_failed()
            log.warning(
                "%s; %d append(s) failed, the log stays at offset %d",
                err.message,
                len(failed),
                self._durable_offset,
            )
        for b in failed:
            if not b.fut.done():
                b.fut.set_exception(type(err)(err.message))
        self._signal_space()

    async def roll(self) -> bool:
        """Seal the active segment now (between commits) if it holds any frame; returns whether
        it did. For the uploader and topic moves: an idle segment is otherwise never sealed."""
        self._check_writable()
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._roll_requests.append(fut)
        self._group.notify(self)
        return await fut

    def _signal_advanced(self) -> None:
        ev, self._advanced = self._advanced, None
        if ev is not None:
            ev.set()

    def _signal_space(self) -> None:
        ev, self._space = self._space, None
        if ev is not None:
            ev.set()

    # ------------------------------------------------------------ reads

    async def wait_for(self, offset: int) -> None:
        """Return once ``durable_offset > offset``; raises LogClosed if the log closes first."""
        while self._durable_offset <= offset:
            if self._closed:
                raise LogClosed(f"WAL {self.directory} is closed")
            if self._broken is not None:
                raise StorageFailed(self._broken.message)
            if self._advanced is None:
                self._advanced = asyncio.Event()
            await self._advanced.wait()

    def read(
        self, from_offset: int, max_entries: int, max_bytes: int = DEFAULT_READ_BYTES
    ) -> list[LogEntry] | None:
        """Durable entries from ``from_offset`` out of the tail cache (at most ``max_entries`` and
        ``max_bytes`` of records, at least one). None when ``from_offset`` is older than the
        cache (use :meth:`read_async`); [] when there is nothing new."""
        return self._cache.read(from_offset, max_entries, max_bytes)

    async def read_async(
        self, from_offset: int, max_entries: int, max_bytes: int = DEFAULT_READ_BYTES
    ) -> list[LogEntry]:
        """Like :meth:`read`, from the cache or the segment files. Offsets below first_offset
        (removed by retention) are skipped. Raises CorruptData at a damaged frame."""
        out: list[LogEntry] = []
        got = 0
        while len(out) < max_entries and (not out or got < max_bytes):
            from_offset = max(from_offset, self.first_offset)
            if from_offset >= self._durable_offset:
                break
            cached = self._cache.read(from_offset, max_entries - len(out), max_bytes - got)
            if cached is not None:
                if out and cached and len(cached[0].record) > max_bytes - got:
                    break
                out.extend(cached)
                break
            try:
                frames = await self._store.read(from_offset, max_entries - len(out), max_bytes - got)
            except CorruptData:
                if out:
                    break  # hand out the good entries; the next read, starting at the damage, raises
                raise
            if frames is None:
                continue  # the segment was deleted meanwhile: start again from first_offset
            if not frames:
                break
            out.extend([LogEntry(f.offset, f.publish_time_ms, f.record) for f in frames])
            got += sum(len(f.record) for f in frames)
            from_offset = frames[-1].offset + 1
        return out

    async def offset_for_time(self, publish_time_ms: int) -> int:
        """The first offset whose publish time is >= ``publish_time_ms`` (durable_offset when
        no stored record is that recent). Reads one index block of one segment."""
        found = await self._store.offset_for_time(publish_time_ms)
        if found is None:
            return self._durable_offset
        return max(found, self.first_offset)

    # ------------------------------------------------------------ retention, stats, close

    async def truncate_before(self, offset: int) -> int:
        """Delete the sealed segments whose every offset is below ``offset`` (never the active
        one, never part of a segment); returns the bytes freed. first_offset moves."""
        victims = self._store.detach_before(offset)
        if not victims:
            return 0
        self._cache.drop_before(self.first_offset)
        freed = await self._store.delete(victims)
        log.info(
            "WAL %s: deleted %d segment(s) below offset %d (%d bytes)",
            self.directory,
            len(victims),
            self.first_offset,
            freed,
        )
        return freed

    def stats(self) -> WalStats:
        if self._latency_ms is None:
            self._latency_ms = (
                _percentile_ms(self._commit_s, 0.5),
                _percentile_ms(self._commit_s, 0.99),
                _percentile_ms(self._fsync_s, 0.5),
                _percentile_ms(self._fsync_s, 0.99),
            )
        commit_p50, commit_p99, fsync_p50, fsync_p99 = self._latency_ms
        return WalStats(
            bytes_on_disk=self._store.bytes_on_disk,
            segments=self._store.segment_count,
            first_offset=self.first_offset,
            next_offset=self._next_offset,
            durable_offset=self._durable_offset,
            appends=self._appends,
            records=self._records,
            commits=self._commits,
            failed_commits=self._failed_commits,
            commit_p50_ms=commit_p50,
            commit_p99_ms=commit_p99,
            fsync_p50_ms=fsync_p50,
            fsync_p99_ms=fsync_p99,
            cache_entries=len(self._cache),
            cache_bytes=self._cache.record_bytes,
        )

    async def aclose(self) -> None:
        """Commit what is queued, close the files (and a private scheduler). Idempotent."""
        self._closing = True
        self._signal_space()
        while (self.has_work() or self._job is not None) and self._broken is None:
            if self._group.closed and self._job is None:
                self._fail_commit([], LogClosed(f"WAL {self.directory}: its commit scheduler is closed"))
                break
            if self._round_over is None:
                self._round_over = asyncio.Event()
            waiter = self._round_over
            self._group.notify(self)
            await waiter.wait()
        if self._own_group:
            await self._group.aclose()
        if not self._closed:
            self._closed = True
            self._group.forget(self)
            self._cache.release()
            self._store.close()
            self._signal_advanced()
            log.debug("WAL %s closed at offset %d", self.directory, self._durable_offset)
